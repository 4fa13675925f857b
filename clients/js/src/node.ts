/**
 * The Node entry point (Node ≥ 20): `Client` over the `ws` package, so the token
 * can travel as an `Authorization: Bearer` header (the default) and the HTTP
 * status of a refused upgrade is reported (`ConnectionFailed.status`).
 *
 * ```js
 * import { Client } from "agora-hub-client";
 * const client = await new Client("ws://127.0.0.1:8765/ws", "alice").connect();
 * ```
 */

import WebSocket, { type ClientOptions as WsClientOptions } from "ws";

import { HubClient } from "./client.js";
import type { ClientOptions } from "./options.js";
import { meaningfulCloseCode, bearerSubprotocol, withQuery, type SocketFactory } from "./socket.js";

export * from "./exports.js";
export { EXIT_HUB_ERROR, EXIT_INTERRUPTED, run, type RunOptions } from "./run.js";

/** Options for the `ws` package's WebSocket — its `ClientOptions`: TLS (`ca`, `cert`,
 * `key`, `rejectUnauthorized`), `agent`, `family` … Typed loosely here so that the
 * declarations a TypeScript app compiles against need no `@types/ws`. */
export type WsOptions = { [option: string]: unknown; headers?: Record<string, string> };

export interface NodeClientOptions extends ClientOptions {
  /** Extra headers for the upgrade request. */
  headers?: Record<string, string>;
  /** Options for the `ws` WebSocket: TLS (`ca`, `cert`, `key`,
   * `rejectUnauthorized`), `agent`, `family` … */
  ws?: WsOptions;
  /** Open sockets some other way (tests, proxies). */
  socketFactory?: SocketFactory;
}

/** An agent's connection to an Agora hub, in Node. */
export class Client extends HubClient {
  constructor(url: string | string[], agentId: string, options: NodeClientOptions = {}) {
    super(url, agentId, {
      ...options,
      socketFactory: options.socketFactory ?? nodeSockets(options.headers ?? {}, options.ws ?? {}),
    });
  }
}

/** Sockets of the `ws` package. */
export function nodeSockets(headers: Record<string, string>, wsOptions: WsOptions): SocketFactory {
  return (request, handlers) => {
    let url = request.url;
    const protocols: string[] = [];
    const allHeaders: Record<string, string> = { ...headers };
    if (request.token !== null) {
      if (request.tokenIn === "header") allHeaders.Authorization = `Bearer ${request.token}`;
      else if (request.tokenIn === "subprotocol") protocols.push(bearerSubprotocol(request.token));
      else url = withQuery(url, [["token", request.token]]);
    }
    const ws = new WebSocket(url, protocols, {
      perMessageDeflate: false,
      maxPayload: request.maxSize,
      handshakeTimeout: request.openTimeout,
      ...wsOptions,
      headers: { ...wsOptions.headers, ...allHeaders },
    } as WsClientOptions);
    let reported = false;
    let failure: string | undefined;
    const report = (info: Parameters<typeof handlers.close>[0]): void => {
      if (reported) return;
      reported = true;
      handlers.close(info);
    };
    ws.on("message", (data, isBinary) => {
      if (!isBinary) handlers.message(data.toString());
    });
    ws.on("error", (error: NodeJS.ErrnoException) => {
      failure = error.code === "ECONNREFUSED" ? "connection refused" : error.message;
    });
    ws.on("close", (code, reason) => {
      report({ code: meaningfulCloseCode(code), reason: reason.toString(), detail: failure });
    });
    ws.on("unexpected-response", (_req, res) => {
      // The hub answered the upgrade with an HTTP error: keep its explanation.
      let body = "";
      const done = (): void => {
        clearTimeout(timer);
        report({ code: null, reason: "", status: res.statusCode ?? 0, detail: body.trim().slice(0, 200) });
        ws.terminate();
      };
      const timer = setTimeout(done, 1000);
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        if (body.length < 1000) body += chunk;
      });
      res.on("end", done);
      res.on("error", done);
    });
    return {
      get bufferedAmount() {
        return ws.bufferedAmount;
      },
      send: (text) => ws.send(text),
      close: (code, reason) => ws.close(code, reason),
      abort: () => ws.terminate(),
    };
  };
}
