// The status page: polls /admin/state and renders it. No framework, no build.
// Every value shown is set with textContent: agent ids, capabilities and
// space names come from agents and are never parsed as HTML.
"use strict";

(() => {
  const POLL_MS = 2000;
  const ARM_MS = 4000;
  const filters = { capability: "", space: "" };
  let armed = null; // { id, until }: the agent whose disconnect awaits a second click
  let timer = null;
  let refreshes = 0;

  const $ = (id) => document.getElementById(id);

  function cell(text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    return td;
  }

  function rate(value) {
    return Number(value || 0).toFixed(value >= 100 ? 0 : 1);
  }

  function since(ms) {
    if (!ms) return "–";
    return new Date(ms).toLocaleString();
  }

  function lag(seconds) {
    const s = Number(seconds || 0);
    return s < 1 ? `${(s * 1000).toFixed(1)} ms` : `${s.toFixed(2)} s`;
  }

  function fill(tableId, rows, empty, columns) {
    const body = $(tableId).tBodies[0];
    if (!rows.length) {
      const tr = document.createElement("tr");
      const td = cell(empty, "empty");
      td.colSpan = columns;
      tr.append(td);
      body.replaceChildren(tr);
      return;
    }
    body.replaceChildren(...rows);
  }

  function nodeRow(node) {
    const tr = document.createElement("tr");
    tr.dataset.node = node.id;
    const ready = cell(node.backplane_ready ? "ready" : "not ready",
      node.backplane_ready ? "ready" : "not-ready");
    tr.append(
      cell(node.id), cell(node.version || "?"),
      cell(String(node.connections), "num"), cell(String(node.spaces), "num"),
      cell(rate(node.deliveries_per_s), "num"), cell(rate(node.messages_in_per_s), "num"),
      cell(lag(node.backplane_lag), "num"), ready, cell(since(node.started_at)),
    );
    return tr;
  }

  function spaceRow(space) {
    const tr = document.createElement("tr");
    tr.dataset.space = space.id;
    tr.append(
      cell(space.id), cell(space.type), cell(String(space.member_count), "num"),
      cell(rate(space.events_per_s), "num"),
    );
    return tr;
  }

  function agentRow(agent) {
    const tr = document.createElement("tr");
    tr.dataset.agent = agent.id;
    const caps = (agent.capabilities || []).join(", ") || "–";
    const action = document.createElement("td");
    const button = document.createElement("button");
    button.type = "button";
    button.dataset.disconnect = agent.id;
    const isArmed = armed && armed.id === agent.id && armed.until > Date.now();
    button.textContent = isArmed ? "Confirm disconnect" : "Disconnect";
    button.className = isArmed ? "danger armed" : "danger";
    action.append(button);
    tr.append(
      cell(agent.id), cell(agent.type || "–"), cell(caps), cell(agent.node),
      cell(since(agent.connected_at)), action,
    );
    return tr;
  }

  function setStatus(text, isError) {
    const status = $("status");
    status.textContent = text;
    status.className = isError ? "status error" : "status";
  }

  function render(state) {
    fill("nodes", state.nodes.map(nodeRow), "no node has reported yet", 9);
    fill("spaces", state.spaces.map(spaceRow), "no spaces", 4);
    fill("agents", state.agents.map(agentRow), "no agents online", 6);
    $("nodes-count").textContent = `(${state.nodes.length})`;
    const shownSpaces = state.spaces.length;
    $("spaces-count").textContent = state.spaces_total > shownSpaces
      ? `(${shownSpaces} busiest of ${state.spaces_total})` : `(${shownSpaces})`;
    $("agents-count").textContent = state.agents_more
      ? `(first ${state.agents.length}; filter to narrow)` : `(${state.agents.length})`;
  }

  async function refresh() {
    clearTimeout(timer);
    const params = new URLSearchParams();
    for (const [key, value] of Object.entries(filters)) if (value) params.set(key, value);
    try {
      const response = await fetch(`/admin/state?${params}`, {
        credentials: "same-origin", cache: "no-store",
      });
      if (response.status === 401) {
        window.location.reload(); // the session ended: back to the login form
        return;
      }
      const body = await response.json();
      if (!response.ok) {
        setStatus(`${body.error.code}: ${body.error.message}`, true);
      } else {
        render(body);
        refreshes += 1;
        document.body.dataset.refreshes = String(refreshes);
        setStatus(`live · updated ${new Date(body.generated_at).toLocaleTimeString()} ` +
          `by ${body.node}`, false);
      }
    } catch (err) {
      setStatus(`hub unreachable: ${err.message}`, true);
    } finally {
      timer = setTimeout(refresh, POLL_MS);
    }
  }

  async function disconnect(agentId) {
    const response = await fetch(`/admin/agents/${encodeURIComponent(agentId)}/disconnect`, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ reason: "disconnected from the status page" }),
    });
    const body = await response.json();
    if (response.ok) setStatus(`disconnected ${agentId} (node ${body.node})`, false);
    else setStatus(`${body.error.code}: ${body.error.message}`, true);
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest("button[data-disconnect]");
    if (!button) return;
    const id = button.dataset.disconnect;
    if (armed && armed.id === id && armed.until > Date.now()) {
      armed = null;
      button.disabled = true;
      disconnect(id).finally(refresh);
    } else {
      armed = { id, until: Date.now() + ARM_MS };
      button.textContent = "Confirm disconnect";
      button.className = "danger armed";
    }
  });

  document.addEventListener("DOMContentLoaded", () => {
    $("filters").addEventListener("submit", (event) => {
      event.preventDefault();
      const form = new FormData(event.target);
      filters.capability = String(form.get("capability") || "").trim();
      filters.space = String(form.get("space") || "").trim();
      refresh();
    });
    refresh();
  });
})();
