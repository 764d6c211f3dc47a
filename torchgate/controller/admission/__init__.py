"""Which waiting gang gets the shared pool next, whole gangs only.

Pure: ``nodes`` (kube-scheduler's filters), ``quota`` (team quotas, borrowing, reclaim),
``preemption`` (whole-gang victims), ``topology`` (where a gang goes, what a capacity wait says,
where elastic extras go) and ``decide`` (the one cycle over them, in the order that decides what
a team gets); ``forecasting`` (what ``decide`` would do on a snapshot with a candidate added:
the forecast, a job's place, what must end, the pool view); ``waiting`` (the queue: places,
backoff, reports) and ``ledger`` (the capacity ledger: live pods, reservations, holds,
evictions, what is free), kept between cycles. The shell, ``admitter``, has a queue and a
ledger, feeds them from reconcilers' requests and the informers, runs ``decide`` and applies its
outcomes, and takes the snapshot ``forecasting`` answers from; ``poolsource`` reads the
TeamQuotas and policies and writes TeamQuota status. The rules shared with the webhook (team
ownership, a gang's quota usage, the admission order) and the unit system are
``torchgate.pytorchjob``'s (``pool``, ``units``).
"""
