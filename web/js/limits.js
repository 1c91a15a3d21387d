// Size checks before sending: a prompt the server would refuse is
// refused here with the reason, and one too big for a WebSocket frame
// goes over HTTP instead. Pure functions; node unit tests exercise them.

// The server's defaults (server/limits.go): one prompt's content, and one
// WebSocket frame from a client.
export const MAX_PROMPT_BYTES = 256 * 1024;
export const MAX_FRAME_BYTES = 64 * 1024;
// Room for the request envelope around the content.
const FRAME_SLACK = 2048;

export function utf8Bytes(s) {
  return new TextEncoder().encode(s).length;
}

export function formatBytes(n) {
  if (n < 1024) return `${n} bytes`;
  return `${(n / 1024).toFixed(n < 10 * 1024 ? 1 : 0)} KiB`;
}

// checkPrompt: {ok, bytes, viaHttp, error}. viaHttp: the request frame
// (JSON-escaped text plus the envelope) would pass the frame limit.
export function checkPrompt(text, { maxPrompt = MAX_PROMPT_BYTES, maxFrame = MAX_FRAME_BYTES } = {}) {
  const bytes = utf8Bytes(text);
  if (bytes > maxPrompt) {
    return {
      ok: false, bytes, viaHttp: false,
      error: `This message is ${formatBytes(bytes)}; the limit is ${formatBytes(maxPrompt)}. Shorten it, or attach the rest as a file the agent can read.`,
    };
  }
  const frame = utf8Bytes(JSON.stringify(text)) + FRAME_SLACK;
  return { ok: true, bytes, viaHttp: frame > maxFrame, error: '' };
}
