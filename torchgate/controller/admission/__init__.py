"""Which waiting gang gets the shared pool next, whole gangs only.

Pure: ``nodes`` (kube-scheduler's filters), ``quota`` (team quotas, borrowing, reclaim),
``preemption`` (whole-gang victims), ``topology`` (where a gang goes) and ``decide`` (the one
cycle over them, in the order that decides what a team gets). The shell, ``admitter``, keeps what
the cycle decides from between cycles (the capacity ledger, the waiting queue, reservations and
holds), runs ``decide`` and applies its outcomes; ``poolsource`` reads the TeamQuotas and
policies and writes TeamQuota status.
"""
