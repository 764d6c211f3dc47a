"""torchgate's admission webhook: pure defaulting/validation plus the aiohttp server."""
