"""One settings object for the whole hub.

Every scalar setting is, in order of precedence: a ``serve`` flag
(``--heartbeat-timeout 10``), an environment variable
(``AGORA_HUB_HEARTBEAT_TIMEOUT=10``), a key in the TOML file given by
``--config`` / ``AGORA_HUB_CONFIG``, or the default below. Structured parts
(declared spaces) live in the TOML file. Durations are seconds (floats),
sizes are bytes.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from hub.config.checks import FILES, check_file, closest_field, parse_networks
from hub.config.checks import unknown_env_vars as _unknown_env_vars
from hub.config.redis_url import parse_redis_url
from hub.core.authz import parse_patterns
from hub.errors import ConfigError
from protocol.names import SpaceKind, is_valid_agent_id, space_kind

ENV_PREFIX = "AGORA_HUB_"
#: Shortest ``api_key`` / ``admin_token``: guessing one must be hopeless.
MIN_SECRET_LENGTH = 16
MAX_API_SERVICES = 100
_config_file: ContextVar[Path | None] = ContextVar("agora_hub_config_file", default=None)


def _default_node_id() -> str:
    return f"{socket.gethostname()[:40]}-{os.getpid()}-{secrets.token_hex(2)}"


class DeclaredSpace(BaseModel):
    """A space that exists without members (``[[spaces]]`` in the config file)."""

    model_config = {"extra": "forbid"}

    id: str
    capacity: int | None = Field(default=None, ge=1)
    description: str | None = None
    allow_join: list[str] | None = None
    allow_publish: list[str] | None = None
    #: Membership at scale, per space (unset: the node-wide settings).
    members_list_limit: int | None = Field(default=None, ge=0)
    member_events_limit: int | None = Field(default=None, ge=0)
    #: Signed envelopes: accept only valid ones in this space.
    require_signed: bool = False
    #: HTTP Agora inbound: POST /agora/{space} and friends.
    agora_http: bool = False
    #: Protocol Documents (file paths) this space supports over HTTP Agora.
    agora_protocols: list[Path] = Field(default_factory=list)
    #: A2A inbound: the space and its members are A2A agents at /a2a/{space}[/{agent}].
    a2a: bool = False
    #: The name and description of the space's A2A agent card.
    a2a_name: str | None = Field(default=None, min_length=1, max_length=256)
    a2a_description: str | None = Field(default=None, max_length=1024)
    #: MCP: members' metadata.mcp_tools are offered as tools on /mcp.
    mcp: bool = False
    #: Signed envelopes over HTTP: accepted from any valid signer, not only the
    #: ``[[signers]]`` mapped to an identity that may publish here (auth on).
    envelope_public: bool = False

    @field_validator("allow_join", "allow_publish")
    @classmethod
    def _globs(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        return None if value is None else list(parse_patterns(value, info.field_name))

    @model_validator(mode="after")
    def _user_space(self) -> DeclaredSpace:
        try:
            kind = space_kind(self.id)
        except Exception as exc:
            raise ValueError(str(exc)) from None
        if kind is not SpaceKind.PUBLIC:
            raise ValueError(f"declared space {self.id!r} must be a user space, not a system one")
        return self


class DeclaredSigner(BaseModel):
    """An envelope signer the operator vouches for (``[[signers]]`` in the config
    file): envelopes it signs reach the HTTP envelope routes as ``agent_id``,
    with that identity's rights (``join`` / ``publish`` claims as a tokens-file
    entry's, and the spaces' rules)."""

    model_config = {"extra": "forbid"}

    did: str
    agent_id: str
    join: list[str] | None = None
    publish: list[str] | None = None

    @field_validator("did")
    @classmethod
    def _did(cls, value: str) -> str:
        if not value.startswith("did:key:z") or not 10 <= len(value) <= 128:
            raise ValueError("a signer's did is its did:key (did:key:z…, as keygen prints it)")
        return value

    @field_validator("agent_id")
    @classmethod
    def _agent_id(cls, value: str) -> str:
        if not is_valid_agent_id(value):
            raise ValueError(f"agent_id {value[:128]!r} is not a valid agent id")
        return value

    @field_validator("join", "publish")
    @classmethod
    def _globs(cls, value: list[str] | None, info: ValidationInfo) -> list[str] | None:
        return None if value is None else list(parse_patterns(value, info.field_name))


class Settings(BaseSettings):
    """All hub settings; see docs/configuration.md for the table."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    host: str = Field("127.0.0.1", description="Interface to listen on.")
    port: int = Field(8765, ge=0, le=65535, description="WebSocket port, /ws (0 picks a free one).")
    http_port: int = Field(
        8766,
        ge=0,
        le=65535,
        description="HTTP port: bridges, health and metrics (0 picks a free one).",
    )
    listen_backlog: int = Field(
        4096,
        ge=1,
        le=65535,
        description="Connections the kernel queues before the hub accepts them, on both "
        "ports (Linux caps it at net.core.somaxconn).",
    )
    redis_url: str | None = Field(
        None,
        description=(
            "redis://…, redis+sentinel://h:p,…/MASTER or redis+cluster://h:p,… makes this"
            " node part of a cluster; unset = in-memory."
        ),
    )
    redis_prefix: str = Field("agora", description="Prefix of every Redis key and channel.")
    node_id: str = Field(
        default_factory=_default_node_id, description="Unique name of this node in the cluster."
    )
    workers: int = Field(1, ge=1, le=64, description="Processes sharing the port (needs Redis).")
    heartbeat_interval: float = Field(
        30.0, gt=0, description="How often clients should send agent.heartbeat."
    )
    heartbeat_timeout: float = Field(
        60.0, gt=0, description="Close (4408) a connection silent for this long."
    )
    liveness_probe_timeout: float = Field(
        5.0, gt=0, description="How long a duplicate's holder has to answer a ping."
    )
    node_heartbeat_interval: float = Field(
        1.0, gt=0, description="How often a cluster node marks itself alive in Redis."
    )
    node_heartbeat_timeout: float = Field(
        5.0,
        gt=0,
        description="A node silent this long is dead: another node reaps its agents "
        "(capped at heartbeat_timeout).",
    )
    max_frame_bytes: int = Field(
        1_048_576, ge=1024, description="Largest inbound frame; bigger closes with 1009."
    )
    outbox_max_bytes: int = Field(
        4_194_304, ge=65536, description="Per-connection outbound bound; over it closes 4008."
    )
    rate_limit: float = Field(100.0, gt=0, description="Messages per second per connection.")
    rate_burst: float = Field(200.0, ge=1, description="Token bucket size.")
    rate_abuse_seconds: float = Field(
        5.0, gt=0, description="Rate-limited overshoot, in seconds of rate, that closes 4429."
    )
    stream_rate_limit: float = Field(
        1000.0,
        gt=0,
        description="Deltas per second per connection on its open streams (their own bucket).",
    )
    stream_rate_burst: float = Field(2000.0, ge=1, description="Stream token bucket size.")
    bridge_rate_limit: float = Field(
        1000.0,
        gt=0,
        description="Messages per second per bridge member (one serves many HTTP callers).",
    )
    bridge_rate_burst: float = Field(2000.0, ge=1, description="Bridge members' bucket size.")
    space_capacity: int = Field(10_000, ge=1, description="Members per space.")
    members_list_limit: int = Field(
        100,
        ge=0,
        description="Longest members array sent; bigger spaces' space.members events carry none.",
    )
    member_events_limit: int = Field(
        1000, ge=0, description="Above this many members, joins and leaves are not broadcast."
    )
    member_events_interval: float = Field(
        0.25,
        ge=0,
        description="Joins and leaves of a space within this many seconds of its last "
        "space.members event go out together in one (0 = each at once).",
    )
    auto_create_spaces: bool = Field(
        True, description="Create user spaces on first join; off = declared spaces only."
    )
    max_streams_per_agent: int = Field(16, ge=1, description="Open streams per connection.")
    stream_threshold: int = Field(
        65536, ge=16, description="data.text longer than this (bytes) is streamed."
    )
    stream_chunk: int = Field(16384, ge=4, description="Bytes of text per hub-made delta.")
    stream_idle_timeout: float = Field(
        30.0, gt=0, description="Cancel a client stream idle this long."
    )
    history_size: int = Field(
        1000, ge=0, le=1_000_000, description="Events kept per space for resume and space.history."
    )
    history_ttl: float = Field(
        300.0,
        ge=1,
        description="A space's history is dropped this long after its last publish; "
        "idempotency keys are remembered this long.",
    )
    auth_mode: Literal["none", "tokens", "jwt"] = Field("none", description="none|tokens|jwt.")
    auth_tokens_file: Path | None = Field(
        None, description='JSON file {"agent-id": "token"} for auth_mode=tokens.'
    )
    jwt_secret: SecretStr | None = Field(None, description="HS256 secret for auth_mode=jwt.")
    jwt_public_key: Path | None = Field(
        None, description="PEM public key or certificate (RSA, EC, Ed25519) for auth_mode=jwt."
    )
    jwt_jwks_url: str | None = Field(
        None, description="Identity provider's JWKS URL (http/https) for auth_mode=jwt."
    )
    jwt_audience: str | None = Field(None, description="Required JWT aud (checked when set).")
    jwt_issuer: str | None = Field(None, description="Required JWT iss (checked when set).")
    jwt_leeway: float = Field(
        30.0, ge=0, le=300, description="Clock skew allowed on JWT exp/nbf/iat."
    )
    token_refresh_grace: float = Field(
        30.0, gt=0, description="After a JWT expires: time to agent.refresh before close 4401."
    )
    identity_file: Path | None = Field(
        None,
        description="The hub's Ed25519 key (agora-hub keygen --out FILE); unset = new per start.",
    )
    tls_certfile: Path | None = Field(None, description="PEM certificate: serve wss://.")
    tls_keyfile: Path | None = Field(None, description="PEM private key for tls_certfile.")
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Proxies (IPs or CIDRs, comma-separated) whose X-Forwarded-For is believed.",
    )
    allowed_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Browser origins allowed (comma-separated); unset = any on /ws, "
        "the hub's own origin only on /mcp.",
    )
    max_connections_per_ip: int = Field(
        0, ge=0, description="Open connections per client IP (0 = no limit); beyond: HTTP 429."
    )
    max_handshakes: int = Field(
        1000,
        ge=1,
        description="TCP connections in their opening handshake at once (nine times as many wait).",
    )
    handshake_timeout: float = Field(
        10.0, gt=0, description="Seconds a client has to finish the opening handshake."
    )
    http_header_timeout: float = Field(
        10.0,
        gt=0,
        description="HTTP port: seconds to send a request's line and headers "
        "(from connecting, or from its first byte); then 408 and close.",
    )
    http_body_timeout: float = Field(
        10.0,
        gt=0,
        description="HTTP port: seconds a request body may lag behind http_body_min_rate "
        "before 408 and close.",
    )
    http_body_min_rate: int = Field(
        8192,
        ge=1,
        description="HTTP port: bytes per second a request body must keep up "
        "(after http_body_timeout).",
    )
    http_keepalive_timeout: float = Field(
        75.0, gt=0, description="HTTP port: close a kept-alive connection idle this long."
    )
    compression: Literal["none", "deflate"] = Field(
        "none", description="permessage-deflate; costs about 3x CPU per delivery."
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Log level."
    )
    log_format: Literal["auto", "json", "console"] = Field(
        "auto", description="auto = console on a tty, JSON otherwise."
    )
    shutdown_timeout: float = Field(
        10.0, ge=0, description="On SIGTERM, how long connections get to close."
    )
    close_timeout: float = Field(
        5.0, gt=0, description="Closing handshake limit before the socket is dropped."
    )
    spaces: list[DeclaredSpace] = Field(
        default_factory=list, description="Declared spaces (config file only)."
    )
    bridge_timeout: float = Field(
        30.0, gt=0, description="How long a bridge waits for an answer before a failure."
    )
    agentprotocol_space: str | None = Field(
        None, description="The space POST /agentprotocol (no space in the path) publishes to."
    )
    bridges: dict[str, list[dict[str, Any]]] = Field(
        default_factory=dict,
        description="Outbound bridges by kind (config file only; each adapter checks its own).",
    )
    envelope_max_skew: float = Field(
        30.0, ge=0, le=600, description="Signed envelopes: seconds a timestamp may be ahead."
    )
    kv_max_entries: int = Field(
        100_000,
        ge=1,
        description="Single node: live keys of the in-memory store (replay ids, conversations).",
    )
    envelope_http: bool = Field(
        True, description="Serve POST /envelope/{space} and /agentprotocol[/{space}]."
    )
    mcp_server: bool = Field(
        True, description="Serve MCP on POST /mcp (hub tools, agents' tools, mcp.calls)."
    )
    envelope_max_waits: int = Field(
        1000, ge=1, description="HTTP envelope requests waiting for an answer at once, per node."
    )
    api_key: SecretStr | None = Field(
        None, description="Key of the server API (/api/* on the HTTP port); unset = API off."
    )
    api_services: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Service names POST /api/publish may stamp as from (comma-separated).",
    )
    admin_token: SecretStr | None = Field(
        None, description="Token of the status page (/admin on the HTTP port); unset = off."
    )
    # ── isolation between faces (docs/security.md): with auth on, every face
    # wants a bearer token unless the operator opens it here.
    agora_http_public: bool = Field(
        False, description="With auth on: /agora/* takes callers without a token."
    )
    a2a_cards_public: bool = Field(
        False, description="With auth on: A2A agent cards are served without a token."
    )
    envelope_http_public: bool = Field(
        False,
        description="With auth on: the envelope routes take posts without a bearer token "
        "(the signer rules still apply).",
    )
    signers: list[DeclaredSigner] = Field(
        default_factory=list,
        description="Envelope signers mapped to agent ids (config file only).",
    )
    caller_share: float = Field(
        0.25,
        gt=0,
        le=1,
        description="Most of each shared per-node bound (MCP calls and sessions, A2A tasks, "
        "bridge waits) one caller may hold; beyond it 429.",
    )

    # Where these settings were read from, for SIGHUP (see reread_settings).
    _sources: tuple[dict[str, Any], Path | None] | None = PrivateAttr(default=None)

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value and not value.startswith("memory://"):
            parse_redis_url(value)  # ValueError says what is wrong with it
        return value

    @field_validator("allowed_origins", mode="before")
    @classmethod
    def _origins(cls, value: Any) -> Any:
        if isinstance(value, str):  # a flag or env var: comma-separated
            value = [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _networks(cls, value: Any) -> Any:
        if isinstance(value, str):  # a flag or env var: comma-separated
            value = value.split(",")
        if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            return [str(n) for n in parse_networks(value)]
        return value

    @field_validator("api_services", mode="before")
    @classmethod
    def _services(cls, value: Any) -> Any:
        if isinstance(value, str):  # a flag or env var: comma-separated
            value = [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, list | tuple):
            if len(value) > MAX_API_SERVICES:
                raise ValueError(f"at most {MAX_API_SERVICES} service names")
            for name in value:
                if not isinstance(name, str) or not is_valid_agent_id(name):
                    raise ValueError(
                        "a service name is an agent id: 1-128 characters of [A-Za-z0-9._:-], "
                        "starting with a letter or digit"
                    )
        return value

    @field_validator("api_key", "admin_token")
    @classmethod
    def _long_secret(cls, value: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        if value is None:
            return None
        # Whitespace around it cannot be sent in a header (HTTP drops it): a
        # secret read from a file ends with its newline. Counted without it.
        secret = value.get_secret_value().strip()
        if len(secret) < MIN_SECRET_LENGTH:
            # Never echo the value: it is a secret, even a bad one.
            raise ValueError(f"{info.field_name} must be at least {MIN_SECRET_LENGTH} characters")
        return SecretStr(secret)

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.heartbeat_timeout <= self.heartbeat_interval:
            raise ValueError("heartbeat_timeout must be greater than heartbeat_interval")
        if self.node_heartbeat_timeout <= self.node_heartbeat_interval:
            raise ValueError("node_heartbeat_timeout must be greater than node_heartbeat_interval")
        if self.auth_mode == "tokens" and self.auth_tokens_file is None:
            raise ValueError("auth_mode=tokens needs auth_tokens_file")
        jwt_keys = [k for k in (self.jwt_secret, self.jwt_public_key, self.jwt_jwks_url) if k]
        if self.auth_mode == "jwt" and len(jwt_keys) != 1:
            raise ValueError(
                "auth_mode=jwt needs exactly one of jwt_secret, jwt_public_key, jwt_jwks_url"
            )
        if self.auth_mode != "jwt" and (jwt_keys or self.jwt_audience or self.jwt_issuer):
            raise ValueError("jwt_* settings need auth_mode=jwt")
        if self.jwt_jwks_url and urlsplit(self.jwt_jwks_url).scheme not in ("http", "https"):
            raise ValueError("jwt_jwks_url must be an http:// or https:// URL")
        if self.outbox_max_bytes < 2 * self.max_frame_bytes:
            # The largest event (a whole frame and the hub's stamps) must fit in a
            # connection's queue beside what is already there: else it closes
            # prompt readers 4008 (the publisher too, through its echo).
            raise ValueError(
                f"outbox_max_bytes ({self.outbox_max_bytes}) must be at least twice "
                f"max_frame_bytes ({self.max_frame_bytes})"
            )
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("tls_certfile and tls_keyfile go together")
        if self.workers > 1 and not self.redis_url:
            raise ValueError("workers > 1 needs redis_url (the workers coordinate through Redis)")
        if self.api_services and self.api_key is None:
            raise ValueError("api_services needs api_key (the server API is off without it)")
        ids = [s.id for s in self.spaces]
        if len(ids) != len(set(ids)):
            raise ValueError("a space is declared twice")
        dids = [signer.did for signer in self.signers]
        if len(dids) != len(set(dids)):
            raise ValueError("a signer's did is declared twice")
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        config = _config_file.get()
        if config is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=config))
        return tuple(sources)

    @property
    def declared(self) -> dict[str, DeclaredSpace]:
        return {s.id: s for s in self.spaces}

    @property
    def node_dead_after(self) -> float:
        """Seconds of silence after which a node is dead and its agents are
        reaped: ``node_heartbeat_timeout``, never more than ``heartbeat_timeout``
        (so a dead node's agents are gone within 2 × heartbeat_timeout)."""
        return min(self.node_heartbeat_timeout, self.heartbeat_timeout)

    @property
    def node_beat_every(self) -> float:
        """How often the node beats (and reaps): ``node_heartbeat_interval``,
        at most a third of :attr:`node_dead_after` so one late beat kills nobody."""
        return min(self.node_heartbeat_interval, self.node_dead_after / 3)


# Settings that only make sense in the config file, not as flags.
FILE_ONLY = {"spaces", "bridges", "signers"}
#: What SIGHUP re-reads from the config file; every other change needs a restart.
RELOADABLE = {"log_level"}


def load_settings(
    overrides: dict[str, Any] | None = None, config_file: str | Path | None = None
) -> Settings:
    """Build settings from flags (``overrides``), env, config file and defaults."""
    path = config_file or os.environ.get(f"{ENV_PREFIX}CONFIG")
    config = Path(path) if path else None
    if config is not None and not config.is_file():
        raise ConfigError(f"config file {config} does not exist")
    token = _config_file.set(config)
    try:
        settings = Settings(**(overrides or {}))
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None
    except (OSError, ValueError) as exc:  # unreadable or malformed TOML
        raise ConfigError(f"cannot read config {config}: {exc}") from None
    finally:
        _config_file.reset(token)
    settings._sources = (dict(overrides or {}), config)
    return settings


def reread_settings(settings: Settings) -> Settings | None:
    """The same flags, env and config file read again (SIGHUP); None when
    ``settings`` did not come from :func:`load_settings`. ConfigError if the
    file is now unusable."""
    if settings._sources is None:
        return None
    overrides, config = settings._sources
    return load_settings(overrides, config)


def check_files(settings: Settings) -> None:
    """Before serving: every file the settings name can be read (ConfigError
    naming the setting, the path and what the file is for)."""
    for name, purpose in FILES.items():
        check_file(getattr(settings, name), name, purpose)


# Variables of the client tools (``agora-hub tail`` …), not of ``serve``:
# a shell that sets them for the tools must not draw warnings from the hub.
CLIENT_ENV = ("url", "agent_id", "token", "token_file")


def unknown_env_vars(environ: Mapping[str, str] | None = None) -> list[str]:
    """One warning per ``AGORA_HUB_*`` variable that names no setting (they are
    otherwise ignored), with the closest setting's variable when there is one."""
    names = [*Settings.model_fields, "config", *CLIENT_ENV]
    return _unknown_env_vars(os.environ if environ is None else environ, names, ENV_PREFIX)


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "settings"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            close = closest_field(Settings, err["loc"])
            msg = f"unknown setting; did you mean {close}?" if close else "unknown setting"
        lines.append(f"{loc}: {msg}")
    return "invalid settings: " + "; ".join(lines)
