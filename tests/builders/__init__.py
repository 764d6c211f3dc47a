"""Builders of what tests feed torchgate, one module per kind of object.

``job`` (PyTorchJobs and their containers), ``node`` (nodes and topology layouts), ``policy``
(PlacementPolicies and their pool-sharing sections), ``team`` (TeamQuotas), ``gang`` (waiting and
admitted gangs of the admission core) and ``pod`` (pods as the apiserver returns them). Raw
objects are shaped exactly as the apiserver or ``kubectl`` sends them; parsed ones go through the
product's own parser, so a test never builds what the code would refuse. A test that needs a kind
or a shape no builder covers adds it here rather than declaring its own.
"""
