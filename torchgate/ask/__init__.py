"""Commands that ask the controller what will happen: ``torchgate explain``, ``simulate``, ``top``.

- :mod:`torchgate.ask.channel`: how a command line reaches the leader's pool service (through the
  apiserver's Service proxy, or a URL given) with the user's own credentials.
- :mod:`torchgate.ask.explanation`: pure; one job's state, reason, place and history from the job,
  its pods and Events and the controller's outlook.
- :mod:`torchgate.ask.poolscreen`: pure; the pool view as one screen of text tables.
- :mod:`torchgate.ask.explain`, :mod:`torchgate.ask.simulate` and :mod:`torchgate.ask.top`: the
  commands.
"""
