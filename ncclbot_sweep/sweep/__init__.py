"""Sweep: a campaign spec and an inventory in, a campaign folder of finished steps out.

Plans the steps and packs them into jobs (:mod:`.campaign`, :mod:`.inventory`), renders the
job scripts (:mod:`.render`), submits, polls, resumes and cancels them through an executor
(:mod:`.runner`, :mod:`.executors`, :mod:`.transport`), copies finished steps back from the
cluster (:mod:`.collect`) and runs tuning jobs (:mod:`.tunejob`). The campaign folder it gives
(``manifest.sqlite`` and a folder per step, architecture section 4.7) is what
:mod:`ncclbot_sweep.ingest` reads. Imports the leaves at the package root and the simulator
(only to install its binaries), never ingest or the analysis (architecture section 2.2).
"""
