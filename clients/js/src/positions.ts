/**
 * Where the client is in each space it joined, so that a rejoin resumes from there.
 *
 * A space's position is its history `epoch` and the last `seq` received.
 * `space.joined` sets it (it reaches the reader before anything of the space that
 * follows it) and every event or stream frame received moves it on. After a
 * reconnect each space is joined again `since` that position; the hub replays what
 * was published meanwhile, and the rejoin's `space.joined` says whether it could
 * (`recovered`) — reported as a `Resumed`.
 *
 * `agent.status` is the exception: it is rejoined from now, not resumed. Its
 * events describe presence — who is online — and replayed after a reconnect they
 * would be stale news told as if it were happening now, this agent's own
 * `offline` (its old connection's) among them. What a watcher needs after a gap is
 * the current state, which the directory gives (`findAgents()`); so the rejoin is
 * reported as a `Resumed` with `recovered: false`, and the live events follow (the
 * Python client does the same).
 *
 * Pure bookkeeping, fed by the client's reader and by its requests: no I/O.
 */

import {
  int,
  str,
  type Frame,
  type JoinResult,
  type MembersChanged,
  type Position,
  type Resumed,
} from "./models.js";

/** Spaces rejoined from now after a reconnect, not resumed (see above). */
export const NOT_RESUMED: ReadonlySet<string> = new Set(["agent.status"]);

/** `space.join`, resuming from `since` when given. */
export function joinMessage(space: string, since: Position | null | undefined): Frame {
  const msg: Frame = { type: "space.join", space };
  if (since) msg.since = { seq: since.seq, epoch: since.epoch };
  return msg;
}

/** The spaces joined, in join order, with their members and positions. */
export class JoinedSpaces {
  private readonly joined = new Set<string>();
  private readonly knownMembers = new Map<string, string[]>();
  private readonly lastSeqs = new Map<string, number>();
  private readonly epochs = new Map<string, string>();
  /** Rejoins in flight, by space: the position each resumes from. */
  readonly resuming = new Map<string, Position>();

  has(space: string): boolean {
    return this.joined.has(space);
  }

  /** The spaces joined, in the order they were first joined. */
  names(): string[] {
    return [...this.joined];
  }

  members(space: string): string[] | null {
    const members = this.knownMembers.get(space);
    return members === undefined ? null : [...members];
  }

  lastSeq(space: string): number | null {
    return this.lastSeqs.get(space) ?? null;
  }

  position(space: string): Position | null {
    const epoch = this.epochs.get(space);
    const seq = this.lastSeqs.get(space);
    return epoch !== undefined && seq !== undefined ? { epoch, seq } : null;
  }

  // ── from the requests ──────────────────────────────────────────────────

  /** The hub's reply to `space.join`: the space is joined. */
  joinedReply(space: string, reply: Frame, resuming: boolean): JoinResult {
    const members = Array.isArray(reply.members)
      ? reply.members.filter((m): m is string => typeof m === "string")
      : [];
    this.joined.add(space);
    this.knownMembers.set(space, members);
    this.resuming.delete(space);
    const epoch = str(reply.epoch);
    const seq = int(reply.seq);
    const hasHistory = epoch !== null && seq !== null;
    return {
      space,
      members,
      memberCount: int(reply.member_count) ?? 0,
      epoch: hasHistory ? epoch : null,
      seq: hasHistory ? seq : null,
      recovered: resuming && typeof reply.recovered === "boolean" ? reply.recovered : null,
    };
  }

  left(space: string): void {
    this.joined.delete(space);
    this.knownMembers.delete(space);
    this.epochs.delete(space);
    this.lastSeqs.delete(space);
  }

  /** A rejoin of `space` is sent: from where (null: from now). */
  rejoining(space: string): Position | null {
    const since = this.position(space);
    if (since !== null) this.resuming.set(space, since);
    return NOT_RESUMED.has(space) ? null : since;
  }

  /** The hub refused the rejoin: the space is no longer joined. */
  rejoinRefused(space: string): void {
    this.joined.delete(space);
    this.resuming.delete(space);
  }

  // ── from the reader ────────────────────────────────────────────────────

  /** An event or stream frame of `space` with this `seq` arrived. */
  seen(space: string, seq: number): void {
    if (seq > (this.lastSeqs.get(space) ?? -1)) this.lastSeqs.set(space, seq);
  }

  membersChanged(change: MembersChanged): void {
    if (this.joined.has(change.space) && change.members !== null) {
      this.knownMembers.set(change.space, change.members);
    }
  }

  /** `space.joined`: where this client now is in the space; a `Resumed` when it
   * ends a rejoin after a reconnect. */
  onJoined(f: Frame): Resumed | null {
    const space = str(f.space);
    const epoch = str(f.epoch);
    const seq = int(f.seq);
    if (space === null || epoch === null || seq === null) return null;
    const recovered = f.recovered === true;
    if (!recovered) {
      // A fresh start from here (a recovered join's replay moves the position
      // itself, event by event, as it arrives).
      this.epochs.set(space, epoch);
      this.lastSeqs.set(space, seq);
    }
    const since = this.resuming.get(space);
    if (since === undefined) return null;
    this.resuming.delete(space);
    return { kind: "resumed", space, recovered, since, epoch, seq };
  }
}
