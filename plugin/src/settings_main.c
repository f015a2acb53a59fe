/*
 * settings_main.c: build/ncclbot-settings prints the settings table of
 * plugin/README.md from the plugin's own table (config.c), so the README cannot
 * drift from the code (tests/plugin/test_plugin_docs.py compares them).
 *   build/ncclbot-settings            the Markdown table
 */
#include <stdio.h>

#include "config.h"

int main(void) {
  nb_config_markdown(stdout);
  return 0;
}
