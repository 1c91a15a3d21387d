// Sign-in: the token arrives in the URL fragment (#token=<jwt>), which the
// browser never sends to the server. We move it to storage at once and strip
// it from the address bar. The payload is decoded only to show who is signed
// in; the server verifies the signature.

const KEY = 'ensemble.token';
const WS_KEY = 'ensemble.workspace';

// tokenFromHash returns the token in a fragment like "#token=…&session=…".
export function tokenFromHash(hash) {
  if (!hash || hash.length < 2) return null;
  const params = new URLSearchParams(hash.replace(/^#/, ''));
  const t = params.get('token');
  return t && t.trim() ? t.trim() : null;
}

// hashWithoutToken removes the token from a fragment and keeps the rest.
export function hashWithoutToken(hash) {
  const params = new URLSearchParams((hash || '').replace(/^#/, ''));
  params.delete('token');
  const rest = params.toString();
  return rest ? '#' + rest : '';
}

function base64UrlDecode(s) {
  let b = s.replace(/-/g, '+').replace(/_/g, '/');
  while (b.length % 4) b += '=';
  const bin = atob(b);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return new TextDecoder().decode(bytes);
}

// decodeJwtPayload returns the claims object, or null when the token is not
// a well-formed JWT. No signature check: display only.
export function decodeJwtPayload(token) {
  if (typeof token !== 'string') return null;
  const parts = token.split('.');
  if (parts.length !== 3 || !parts[1]) return null;
  try {
    const claims = JSON.parse(base64UrlDecode(parts[1]));
    return claims && typeof claims === 'object' && !Array.isArray(claims) ? claims : null;
  } catch {
    return null;
  }
}

// principalFromClaims maps claims to {id, name, workspaces:[{id, role}], exp}.
// The default workspaces claim is an object from workspace id to role; an
// array of ids (or of {id, role}) is accepted too.
export function principalFromClaims(claims) {
  if (!claims) return null;
  const workspaces = normalizeWorkspaces(claims.workspaces);
  const id = String(claims.sub || '');
  return {
    id,
    name: String(claims.name || claims.preferred_username || claims.email || id || 'Unknown user'),
    workspaces,
    exp: typeof claims.exp === 'number' ? claims.exp : null,
  };
}

export function normalizeWorkspaces(w) {
  const out = [];
  if (Array.isArray(w)) {
    for (const item of w) {
      if (typeof item === 'string') out.push({ id: item, role: '' });
      else if (item && item.id) out.push({ id: String(item.id), role: String(item.role || '') });
    }
  } else if (w && typeof w === 'object') {
    for (const [id, role] of Object.entries(w)) out.push({ id, role: typeof role === 'string' ? role : '' });
  }
  return out;
}

// isExpired reports whether exp (seconds) is in the past, with leeway.
export function isExpired(principal, nowMs = Date.now(), leewaySec = 30) {
  return !!(principal && principal.exp && principal.exp + leewaySec < nowMs / 1000);
}

// takeToken reads the token from the fragment (storing it and cleaning the
// address bar) or from storage. Returns null when there is none.
export function takeToken() {
  const fromHash = tokenFromHash(location.hash);
  if (fromHash) {
    store(fromHash);
    history.replaceState(history.state, '', location.pathname + location.search + hashWithoutToken(location.hash));
    return fromHash;
  }
  try {
    return sessionStorage.getItem(KEY) || localStorage.getItem(KEY);
  } catch {
    return null;
  }
}

function store(token) {
  try { sessionStorage.setItem(KEY, token); } catch { /* storage disabled */ }
  try { localStorage.setItem(KEY, token); } catch { /* storage disabled */ }
}

export function signOut() {
  try { sessionStorage.removeItem(KEY); } catch { /* ignore */ }
  try { localStorage.removeItem(KEY); } catch { /* ignore */ }
}

export function savedWorkspace() {
  try { return localStorage.getItem(WS_KEY); } catch { return null; }
}

export function saveWorkspace(id) {
  try { localStorage.setItem(WS_KEY, id); } catch { /* ignore */ }
}
