package protocol

// CloseCode is a WebSocket close status the server ends a connection with.
// 4000–4499: the client should reconnect (with backoff); 4500–4999: it
// should not reconnect without a change (a new token, a fix).
type CloseCode int

const (
	CloseShutdown        CloseCode = 4001 // server shutting down: reconnect elsewhere
	CloseIdle            CloseCode = 4002 // nothing received for too long
	CloseSlowConsumer    CloseCode = 4008 // fell too far behind
	CloseTokenExpired    CloseCode = 4010 // reconnect with a fresh token
	CloseTooMany         CloseCode = 4029 // too many connections for this user
	CloseProtocol        CloseCode = 4500 // protocol violation
	CloseUnauthenticated CloseCode = 4501 // missing or invalid token
)

// CloseCodes lists every close code the server sends of its own (the
// library's 1009 for an oversized frame aside), for the drift test.
var CloseCodes = []CloseCode{CloseShutdown, CloseIdle, CloseSlowConsumer, CloseTokenExpired,
	CloseTooMany, CloseProtocol, CloseUnauthenticated}
