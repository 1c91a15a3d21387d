// Package protocol is the Ensemble wire protocol, version 1: every frame a
// client and the server exchange over the WebSocket (ensemble.v1 and
// ensemble.v1+batch), every event kind and payload a subscription
// carries, the closed list of error codes with their HTTP statuses, and
// the operation names with their inputs and results.
//
// The package owns the encoding clients see. Domain types live in host;
// this package maps them onto the wire explicitly (ErrorCode maps a
// host.Code), so a field added to a domain struct never becomes a wire
// field by accident. The server and the hub import protocol; protocol
// imports only the domain (host) and auth, never a transport.
//
// docs/protocol.md is the prose description of the same protocol and
// server/openapi.json the REST view of it; protocol's tests fail when
// either names a kind, code or operation this package does not, or the
// other way round.
package protocol
