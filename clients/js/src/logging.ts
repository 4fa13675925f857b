/**
 * Where the client reports what the application may want to know but did not ask
 * for: reconnects and dropped items (`warn`), failed attempts (`info`), details
 * (`debug`). By default warnings go to `console.warn`; pass `logger: null` to
 * silence the client, or any object with these methods (pino, winston, console).
 * The client never logs a token.
 */

export interface Logger {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
}

const PREFIX = "agora-hub-client:";

export const consoleWarnings: Logger = {
  debug: () => {},
  info: () => {},
  warn: (message) => console.warn(PREFIX, message),
};

export const silent: Logger = { debug: () => {}, info: () => {}, warn: () => {} };

/** The logger for the `logger` option: undefined → warnings on the console,
 * null → nothing, else the methods given (missing ones do nothing). */
export function loggerFrom(option: Partial<Logger> | null | undefined): Logger {
  if (option === undefined) return consoleWarnings;
  if (option === null) return silent;
  return {
    debug: (m) => option.debug?.(m),
    info: (m) => option.info?.(m),
    warn: (m) => option.warn?.(m),
  };
}

/** A short description of whatever was thrown. */
export function describe(error: unknown): string {
  if (error instanceof Error) return error.message || error.name;
  return String(error);
}
