"""Commands that ask the controller what will happen: ``torchgate explain`` and ``simulate``.

- :mod:`torchgate.ask.channel`: how a command line reaches the leader's pool service (through the
  apiserver's Service proxy, or a URL given) with the user's own credentials.
- :mod:`torchgate.ask.explanation`: pure; one job's state, reason, place and history from the job,
  its pods and Events and the controller's outlook.
- :mod:`torchgate.ask.explain` and :mod:`torchgate.ask.simulate`: the commands.
"""
