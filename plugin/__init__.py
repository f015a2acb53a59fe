"""The plugin's C sources as package data: ``ncclbot_sweep.pluginbuild`` compiles them on first use."""
