"""Configuration: the settings (flags, env vars, the TOML file, defaults), what
is wrong with them said so an operator can fix it, and the hub's own identity
key loaded from ``identity_file``.

May import: :mod:`hub.core`, :mod:`hub.errors`, :mod:`protocol`.
"""
