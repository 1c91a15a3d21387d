// Package protocol is the Ensemble wire protocol: every frame a client and
// the server exchange over the WebSocket (Subprotocol, and SubprotocolBatch
// for multi-event frames), every event kind and payload a subscription
// carries, every operation name with its input and result, and the closed
// list of error codes with their HTTP statuses.
//
// The package owns the encoding clients see. Domain types live in host;
// this package has its own type for every domain value that reaches a
// client and maps it explicitly: FromX maps a host value onto the wire,
// ToX maps what a client sends onto the domain, ErrorCode maps a domain
// error class onto a wire code. A field added to a host struct is not on
// the wire until protocol maps it. The server and the hub import protocol;
// protocol imports only the domain (host) and auth, never a transport.
//
// docs/protocol.md describes the same protocol in prose and
// server/openapi.json is its REST view. The package's tests keep them in
// step: every event kind, error code (with status and retryability), frame
// type and operation (with its role), every OpenAPI schema's fields and
// every WebSocket-only field must appear on both sides, and
// testdata/wire.golden.json pins the encoding of each mapped type.
package protocol
