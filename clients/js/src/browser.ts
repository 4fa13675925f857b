/**
 * The browser entry point (also for Deno, Bun, edge runtimes and Node ≥ 22 —
 * anything with a global `WebSocket`): `Client` over the native WebSocket. A
 * browser cannot set headers on a WebSocket, so the token travels as the
 * subprotocol `bearer.TOKEN` (the hub selects it), or as `?token=` with
 * `tokenIn: "query"`.
 *
 * ```html
 * <script type="module">
 *   import { Client } from "./node_modules/agora-hub-client/dist/browser.js";
 *   const client = await new Client("wss://hub.example/ws", "alice", { token }).connect();
 * </script>
 * ```
 */

import { HubClient } from "./client.js";
import type { ClientOptions } from "./options.js";
import { ConnectionFailed } from "./errors.js";
import { meaningfulCloseCode, bearerSubprotocol, withQuery, type SocketFactory } from "./socket.js";

export * from "./exports.js";

export interface BrowserClientOptions extends ClientOptions {
  /** Open sockets some other way (tests, proxies). */
  socketFactory?: SocketFactory;
}

/** An agent's connection to an Agora hub, in a browser. */
export class Client extends HubClient {
  constructor(url: string | string[], agentId: string, options: BrowserClientOptions = {}) {
    super(url, agentId, {
      tokenIn: "subprotocol",
      ...options,
      socketFactory: options.socketFactory ?? nativeSockets(),
    });
  }
}

/** The part of the WHATWG WebSocket used here. */
interface NativeWebSocket {
  readonly bufferedAmount: number;
  onmessage: ((event: { data: unknown }) => void) | null;
  onclose: ((event: { code: number; reason: string }) => void) | null;
  onerror: ((event: unknown) => void) | null;
  send(data: string): void;
  close(code?: number, reason?: string): void;
}
type NativeWebSocketClass = new (url: string, protocols?: string[]) => NativeWebSocket;

/** Sockets of the platform's own `WebSocket`. */
export function nativeSockets(): SocketFactory {
  return (request, handlers) => {
    const Native = (globalThis as { WebSocket?: NativeWebSocketClass }).WebSocket;
    if (Native === undefined) {
      throw new ConnectionFailed("this platform has no WebSocket: use the Node entry point (agora-hub-client/node)");
    }
    let url = request.url;
    const protocols: string[] = [];
    if (request.token !== null) {
      if (request.tokenIn === "subprotocol") protocols.push(bearerSubprotocol(request.token));
      else if (request.tokenIn === "query") url = withQuery(url, [["token", request.token]]);
      else throw new TypeError("a browser WebSocket cannot send headers: use tokenIn 'subprotocol' or 'query'");
    }
    const ws = new Native(url, protocols);
    ws.onmessage = (event) => {
      if (typeof event.data === "string") handlers.message(event.data);
    };
    ws.onerror = () => {}; // the close event that follows says what there is to say
    ws.onclose = (event) => handlers.close({ code: meaningfulCloseCode(event.code), reason: event.reason });
    return {
      get bufferedAmount() {
        return ws.bufferedAmount;
      },
      send: (text) => ws.send(text),
      close: (code, reason) => ws.close(code, reason),
      // A browser cannot drop a connection: closing it is the most it can do (the
      // link has already reported it lost).
      abort: () => ws.close(),
    };
  };
}
