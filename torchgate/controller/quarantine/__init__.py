"""Quarantine of nodes where gangs keep failing for reasons outside the job.

``rules`` counts a node's infrastructure faults and says when to quarantine, lift or tidy it
(pure); ``keeper`` records the faults the reconciler reports and patches the nodes.
"""
