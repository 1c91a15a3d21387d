// Presence: who watches the open session, merged per person by the
// server (presence events and snapshots carry {sessionId, watchers}).
// Pure functions; node unit tests exercise them.

// presenceList normalizes a presence payload to a list of watchers,
// one per person, keeping the server's order (earliest arrival first).
export function presenceList(p) {
  const list = Array.isArray(p) ? p : (p && Array.isArray(p.watchers) ? p.watchers : []);
  const seen = new Set();
  const out = [];
  for (const w of list) {
    const id = w && (w.userId || w.id);
    if (!id || seen.has(id)) continue;
    seen.add(id);
    out.push({ userId: id, name: w.name || id, since: w.since || '', typing: !!w.typing, replicas: w.replicas || [],
      sessions: w.sessions || [] });
  }
  return out;
}

// mergePresence combines presence lists (e.g. several replicas' views)
// into one entry per person: earliest since, typing if any says so.
export function mergePresence(...lists) {
  const by = new Map();
  for (const list of lists) {
    for (const w of presenceList(list)) {
      const cur = by.get(w.userId);
      if (!cur) { by.set(w.userId, { ...w, replicas: [...w.replicas] }); continue; }
      if (w.since && (!cur.since || w.since < cur.since)) cur.since = w.since;
      cur.typing = cur.typing || w.typing;
      for (const r of w.replicas) if (!cur.replicas.includes(r)) cur.replicas.push(r);
    }
  }
  return [...by.values()].sort((a, b) => (a.since === b.since ? (a.userId < b.userId ? -1 : 1) : a.since < b.since ? -1 : 1));
}

// presenceSummary is what the session bar shows: everyone watching (you
// included) and who else is typing, in words.
export function presenceSummary(watchers, meId) {
  const list = presenceList(watchers);
  const typers = list.filter((w) => w.typing && w.userId !== meId).map((w) => w.name);
  let typing = '';
  if (typers.length === 1) typing = `${typers[0]} is typing…`;
  else if (typers.length === 2) typing = `${typers[0]} and ${typers[1]} are typing…`;
  else if (typers.length > 2) typing = `${typers.length} people are typing…`;
  return {
    count: list.length,
    watching: list.length > 1 ? `${list.length} watching` : '',
    others: list.filter((w) => w.userId !== meId),
    typing,
  };
}

// typingSignal decides when the composer tells the server "typing": at
// the first keystroke, then at most every `every` ms while keys keep
// coming, and "stopped" once after `idle` ms without a key or on send.
export function createTypingSignal(send, { every = 3000, idle = 4000, now = () => Date.now(), setTimer = setTimeout, clearTimer = clearTimeout } = {}) {
  let lastSent = 0;
  let active = false;
  let timer = 0;
  const stop = () => {
    clearTimer(timer);
    if (active) { active = false; send(false); }
  };
  return {
    keystroke() {
      const t = now();
      if (!active || t - lastSent >= every) { active = true; lastSent = t; send(true); }
      clearTimer(timer);
      timer = setTimer(stop, idle);
    },
    stop,
  };
}
