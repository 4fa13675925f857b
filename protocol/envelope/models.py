"""Typed envelopes and payloads of agora/1.0 (seed 000) and agentprotocol/0.1 (seed 003).

Models are strict (``"timeout": "10"`` is an error, not 10) and keep unknown
fields (``extra="allow"``): a signature covers everything, so nothing is
dropped, and newer peers keep working. Required fields are the ones the
seeds, or the reference implementations' validators, require.
Durations (``timeout``, ``ttl``, ``eta``) are milliseconds.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_ID_LEN = 256

EnvelopeId = Annotated[str, Field(min_length=1, max_length=MAX_ID_LEN)]
Text = Annotated[str, Field(min_length=1)]
Millis = Annotated[float, Field(gt=0)]


class _Model(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)


class AgoraType(StrEnum):
    HELLO = "HELLO"
    WELCOME = "WELCOME"
    STATUS = "STATUS"
    REQUEST = "REQUEST"
    OFFER = "OFFER"
    ACCEPT = "ACCEPT"
    RESULT = "RESULT"
    ERROR = "ERROR"


class AgentProtocolType(StrEnum):
    HELLO = "hello"
    REQUEST = "request"
    RESPONSE = "response"
    NOTIFY = "notify"
    ERROR = "error"


# ── agora/1.0 ───────────────────────────────────────────────────────────────


class AgoraSender(_Model):
    id: Text
    signature: str = ""


class AgoraEnvelope(_Model):
    protocol: Literal["agora/1.0"]
    id: EnvelopeId
    timestamp: str
    type: AgoraType = Field(strict=False)  # the wire carries the value
    sender: AgoraSender
    payload: dict[str, Any]


class HelloPayload(_Model):
    name: str | None = None
    capabilities: list[str] | None = None


class WelcomePayload(_Model):
    request_id: str | None = None  # the HELLO being answered
    identity: dict[str, Any] | None = None
    space: str | None = None
    members: list[dict[str, Any]] | None = None


class StatusPayload(_Model):
    request_id: str | None = None
    status: str | None = None


class RequestPayload(_Model):
    resource: Text
    params: dict[str, Any] = Field(default_factory=dict)
    budget: dict[str, Any] | None = None
    timeout: Millis | None = None


class OfferPayload(_Model):
    request_id: EnvelopeId
    cost: float | None = None
    ttl: Millis | None = None
    eta: Annotated[float, Field(ge=0)] | None = None


class AcceptPayload(_Model):
    offer_id: EnvelopeId
    payment_proof: str | None = None


class ResultPayload(_Model):
    request_id: EnvelopeId
    status: Literal["success", "partial"]
    data: Any = None


class ErrorPayload(_Model):
    request_id: str | None = None
    code: int
    message: str


AGORA_PAYLOADS: dict[AgoraType, type[_Model]] = {
    AgoraType.HELLO: HelloPayload,
    AgoraType.WELCOME: WelcomePayload,
    AgoraType.STATUS: StatusPayload,
    AgoraType.REQUEST: RequestPayload,
    AgoraType.OFFER: OfferPayload,
    AgoraType.ACCEPT: AcceptPayload,
    AgoraType.RESULT: ResultPayload,
    AgoraType.ERROR: ErrorPayload,
}


# ── agentprotocol/0.1 ───────────────────────────────────────────────────────


class APFrom(_Model):
    agentId: Text
    name: str | None = None
    capabilities: list[str] = Field(default_factory=list)
    publicKey: str | None = None


class APTo(_Model):
    agentId: str | None = None
    broadcast: bool = False


class APMessage(_Model):
    protocol: Literal["agentprotocol/0.1"]
    id: EnvelopeId
    timestamp: str
    from_: APFrom = Field(alias="from")
    to: APTo | None = None
    type: AgentProtocolType = Field(strict=False)
    payload: dict[str, Any]
    signature: str = ""
    metadata: dict[str, Any] | None = None


class APHelloPayload(_Model):
    version: str | None = None
    features: list[str] = Field(default_factory=list)


class APRequestPayload(_Model):
    action: Text
    correlationId: Annotated[str, Field(min_length=1, max_length=MAX_ID_LEN)]
    params: Any = None
    timeout: Millis | None = None


class APResponsePayload(_Model):
    correlationId: Annotated[str, Field(min_length=1, max_length=MAX_ID_LEN)]
    status: str = "success"
    result: Any = None


class APErrorPayload(_Model):
    correlationId: Annotated[str, Field(min_length=1, max_length=MAX_ID_LEN)]
    code: Text
    message: Text
    details: Any = None


class APNotifyPayload(_Model):
    event: str | None = None
    data: Any = None


AGENTPROTOCOL_PAYLOADS: dict[AgentProtocolType, type[_Model]] = {
    AgentProtocolType.HELLO: APHelloPayload,
    AgentProtocolType.REQUEST: APRequestPayload,
    AgentProtocolType.RESPONSE: APResponsePayload,
    AgentProtocolType.ERROR: APErrorPayload,
    AgentProtocolType.NOTIFY: APNotifyPayload,
}
