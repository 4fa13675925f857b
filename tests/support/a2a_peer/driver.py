"""Runs the real ``a2a-sdk`` 1.3.0 for the interop tests, inside its own venv.

    python driver.py client < plan.json   # its client against a URL; prints one JSON result
    python driver.py server < spec.json   # its server on 127.0.0.1; prints JSON lines

*client*: ``{"url", "token"?, "steps": [...]}``, each step one call made with
the library's own client (``A2ACardResolver``, ``create_client``,
``send_message`` blocking or streaming, ``get_task``, ``cancel_task``,
``list_tasks`` with ``params`` as the JSON binding spells them, ``subscribe``;
``history_length`` on ``send`` and ``get``); a
step's ``task_id`` / ``context_id`` may be ``{"from": n}``: the ids the
result of step ``n`` carried. Prints ``{"results": [...]}`` with each step's
events (as the library parsed them, back to JSON) or the error it raised.

*server*: ``DefaultRequestHandler`` with an executor chosen by the text's
prefix — ``stream:`` three artifact chunks, ``ask:`` input required (the
next message completes it), ``slow:`` waits for a cancel, ``fail:`` fails,
``msg:`` answers with a message, anything else one echo artifact. Prints
``{"event": "listening", "port"}`` then one line per ``execute`` / ``cancel``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any

from google.protobuf.json_format import MessageToDict


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


# ── client ──────────────────────────────────────────────────────────────────


def ids_of(events: list[dict[str, Any]]) -> tuple[str | None, str | None]:
    task_id = context_id = None
    for event in events:
        for key in ("task", "statusUpdate", "artifactUpdate", "message"):
            obj = event.get(key)
            if not isinstance(obj, dict):
                continue
            task_id = obj.get("id") if key == "task" else obj.get("taskId", task_id)
            context_id = obj.get("contextId", context_id)
    return task_id, context_id


async def run_client(plan: dict[str, Any]) -> dict[str, Any]:
    import httpx
    from a2a.client import A2ACardResolver, ClientConfig, create_client
    from a2a.types.a2a_pb2 import (
        CancelTaskRequest,
        GetTaskRequest,
        ListTasksRequest,
        Message,
        Part,
        Role,
        SendMessageRequest,
        SubscribeToTaskRequest,
    )
    from google.protobuf.json_format import ParseDict

    headers = {"Authorization": f"Bearer {plan['token']}"} if plan.get("token") else {}
    http = httpx.AsyncClient(headers=headers, timeout=30)
    results: list[dict[str, Any]] = []

    def ref(value: Any, which: int) -> Any:
        if isinstance(value, dict) and "from" in value:
            return results[value["from"]]["ids"][which]
        if isinstance(value, dict) and "token" in value:  # a listing's next page
            return results[value["token"]]["list"]["nextPageToken"]
        return value

    async def send(client: Any, step: dict[str, Any]) -> list[dict[str, Any]]:
        message = Message(role=Role.ROLE_USER, message_id=str(uuid.uuid4()))
        message.parts.append(Part(text=step["text"]))
        if step.get("task_id") is not None:
            message.task_id = ref(step["task_id"], 0)
        if step.get("context_id") is not None:
            message.context_id = ref(step["context_id"], 1)
        request = SendMessageRequest(message=message)
        if step.get("return_immediately"):
            request.configuration.return_immediately = True
        if step.get("history_length") is not None:
            request.configuration.history_length = step["history_length"]
        events = []
        async for event in client.send_message(request):
            events.append(MessageToDict(event))
            if step.get("cancel_after_first"):
                task_id, _ = ids_of(events)
                cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
                events.append({"cancelled": MessageToDict(cancelled)})
                step = {**step, "cancel_after_first": False}
        return events

    for step in plan["steps"]:
        url = step.get("url", plan["url"])
        op = step["op"]
        record: dict[str, Any] = {"op": op, "events": [], "ids": [None, None]}
        try:
            if op == "card":
                card = await A2ACardResolver(http, url).get_agent_card()
                record["card"] = MessageToDict(card)
            else:
                config = ClientConfig(streaming=bool(step.get("streaming")), httpx_client=http)
                client = await create_client(url, client_config=config)
                if op == "send":
                    record["events"] = await send(client, step)
                elif op == "get":
                    request = GetTaskRequest(id=ref(step["task_id"], 0))
                    if step.get("history_length") is not None:
                        request.history_length = step["history_length"]
                    task = await client.get_task(request)
                    record["events"] = [{"task": MessageToDict(task)}]
                elif op == "list":
                    params = {k: ref(v, 1) for k, v in step.get("params", {}).items()}
                    listed = await client.list_tasks(ParseDict(params, ListTasksRequest()))
                    record["list"] = MessageToDict(listed)
                elif op == "subscribe":
                    request = SubscribeToTaskRequest(id=ref(step["task_id"], 0))
                    async for event in client.subscribe(request):
                        record["events"].append(MessageToDict(event))
                elif op == "cancel":
                    task = await client.cancel_task(CancelTaskRequest(id=ref(step["task_id"], 0)))
                    record["events"] = [{"task": MessageToDict(task)}]
            record["ids"] = list(ids_of(record["events"]))
        except Exception as exc:  # the library's own error is the result
            record["error"] = {"type": type(exc).__name__, "message": str(exc)[:2000]}
        results.append(record)
    await http.aclose()
    return {"results": results}


# ── server ──────────────────────────────────────────────────────────────────


def run_server(spec: dict[str, Any]) -> None:
    import uvicorn
    from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_message
    from a2a.server.agent_execution import AgentExecutor
    from a2a.server.request_handlers import DefaultRequestHandler
    from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
    from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
    from a2a.types.a2a_pb2 import (
        AgentCapabilities,
        AgentCard,
        AgentInterface,
        AgentSkill,
        Part,
        Role,
    )
    from starlette.applications import Starlette

    class Executor(AgentExecutor):
        async def execute(self, context: Any, queue: Any) -> None:
            text = context.get_user_input()
            mode = text.split(":", 1)[0]
            resumed = context.current_task is not None
            emit({"event": "execute", "text": text, "task_id": context.task_id,
                  "context_id": context.context_id, "resumed": resumed})  # fmt: skip
            if mode == "msg":
                await queue.enqueue_event(
                    new_text_message(
                        "echo:" + text, context_id=context.context_id, role=Role.ROLE_AGENT
                    )
                )
                return
            task = context.current_task or new_task_from_user_message(context.message)
            if not resumed:
                await queue.enqueue_event(task)
            up = TaskUpdater(queue, task.id, task.context_id)
            await up.start_work()

            def says(words: str) -> Any:
                return new_text_message(
                    words, context_id=task.context_id, task_id=task.id, role=Role.ROLE_AGENT
                )

            if resumed:
                await up.add_artifact([Part(text=f"thanks for {text}")])
                await up.complete()
            elif mode == "stream":
                for i in range(3):
                    await up.add_artifact(
                        [Part(text=f"chunk{i} ")], artifact_id="a1", append=i > 0,
                        last_chunk=i == 2,
                    )  # fmt: skip
                    await asyncio.sleep(0.05)
                await up.complete()
            elif mode == "ask":
                await up.requires_input(says("which city?"))
            elif mode == "slow":
                await up.add_artifact([Part(text="working… ")], artifact_id="s1")
                await asyncio.sleep(60)
                await up.complete()
            elif mode == "fail":
                await up.failed(says("it broke"))
            else:
                await up.add_artifact([Part(text="echo:" + text)])
                await up.complete()

        async def cancel(self, context: Any, queue: Any) -> None:
            emit({"event": "cancel", "task_id": context.task_id})
            await TaskUpdater(queue, context.task_id, context.context_id).cancel()

    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", spec.get("port", 0)))
    sock.listen(128)  # connections wait in the backlog until uvicorn serves
    port = sock.getsockname()[1]
    card = AgentCard(
        name=spec.get("name", "sdk-echo"),
        description="an a2a-sdk agent for the interop tests",
        version="1.0",
        supported_interfaces=[
            AgentInterface(
                url=f"http://127.0.0.1:{port}/", protocol_binding="JSONRPC", protocol_version="1.0"
            )
        ],
        capabilities=AgentCapabilities(streaming=spec.get("streaming", True)),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[
            AgentSkill(id="echo", name="Echo", description="echoes", tags=["echo"]),
            AgentSkill(id="summarize", name="Summarize", description="summarizes", tags=["text"]),
        ],
    )
    handler = DefaultRequestHandler(
        agent_executor=Executor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    app = Starlette(routes=create_agent_card_routes(card) + create_jsonrpc_routes(handler, "/"))
    config = uvicorn.Config(app, log_level="warning")
    server = uvicorn.Server(config)
    emit({"event": "listening", "port": port})
    server.run(sockets=[sock])


def main() -> None:
    mode = sys.argv[1]
    spec = json.loads(sys.stdin.read() or "{}")
    if mode == "client":
        emit(asyncio.run(run_client(spec)))
    else:
        run_server(spec)


if __name__ == "__main__":
    main()
