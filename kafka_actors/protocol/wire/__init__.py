"""Bytes on the wire: API keys and their kio codecs (``apis``), ApiVersions negotiation
(``versions``), framing, headers and correlation ids (``framing``), bounded decoding of
frames (``bounds``) and the typed request builders (``requests``). Pure.
"""
