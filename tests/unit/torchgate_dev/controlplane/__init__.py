"""The control-plane harness without a cluster: stages, nodes, CRDs, keys, config, failures.

The e2e suite proves the harness against real binaries; these tests pin the parts that can be
checked offline (and the failure paths, with fake binaries that misbehave on purpose).
"""
