package protocol

import (
	"encoding/json"
	"time"

	"github.com/ensemble-dev/ensemble/auth"
)

// Subprotocol is the WebSocket subprotocol clients must request.
const Subprotocol = "ensemble.v1"

// SubprotocolBatch is protocol version 2: version 1 plus multi-event
// frames (a JSON array of frames). A client opts in by offering it.
const SubprotocolBatch = "ensemble.v2"

// Version is sent in the ready frame (Version+1 for SubprotocolBatch).
const Version = 1

// Frame types, the "type" of every frame.
const (
	FrameHello        = "hello"
	FrameRequest      = "request"
	FramePong         = "pong"
	FrameReady        = "ready"
	FrameResponse     = "response"
	FrameEvent        = "event"
	FrameError        = "error"
	FrameUnsubscribed = "unsubscribed"
	FrameReconnect    = "reconnect"
	FramePing         = "ping"
)

// ClientFrameTypes lists the frames a client sends; ServerFrameTypes the
// frames the server sends. Either side may ping; the other answers pong.
var (
	ClientFrameTypes = []string{FrameHello, FrameRequest, FramePong, FramePing}
	ServerFrameTypes = []string{FrameReady, FrameResponse, FrameEvent, FramePing, FrameError, FrameUnsubscribed, FrameReconnect}
)

// OffsetUnitUTF16 names the unit of message_delta offsets in the ready
// frame: UTF-16 code units, what JavaScript strings index by.
const OffsetUnitUTF16 = "utf16"

// ClientFrame is every frame a client may send: hello (Token), request
// (ID, Op, Input), pong, and ping.
type ClientFrame struct {
	Type  string          `json:"type"`
	ID    json.RawMessage `json:"id,omitempty"`
	Op    string          `json:"op,omitempty"`
	Input json.RawMessage `json:"input,omitempty"`
	Token string          `json:"token,omitempty"`
}

// ResponseFrame answers one request: Result when OK, Error otherwise. ID
// echoes the request's id (null when it was unreadable).
type ResponseFrame struct {
	Type   string          `json:"type"`
	ID     json.RawMessage `json:"id"`
	OK     bool            `json:"ok"`
	Result any             `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}

// ReadyFrame is the server's first frame on an authenticated connection.
type ReadyFrame struct {
	Type         string         `json:"type"`
	Protocol     int            `json:"protocol"`
	ServerEpoch  string         `json:"serverEpoch"`
	ConnectionID string         `json:"connectionId"`
	Principal    auth.Principal `json:"principal"`
	// ExpiresAt is the token's exp: refresh before it (auth.refresh).
	ExpiresAt time.Time `json:"expiresAt"`
	// OffsetUnit names the unit of message_delta offsets.
	OffsetUnit string `json:"offsetUnit"`
	// Agent is the agent this server runs now (labels of past turns come
	// from the turns); Limits are the sizes a client checks before sending.
	Agent  AgentInfo   `json:"agent"`
	Limits ReadyLimits `json:"limits"`
}

// ReadyLimits are the sizes a client checks before sending.
type ReadyLimits struct {
	MaxFrameBytes  int64 `json:"maxFrameBytes"`
	MaxPromptBytes int   `json:"maxPromptBytes"`
}

// RefreshResult answers auth.refresh.
type RefreshResult struct {
	Principal auth.Principal `json:"principal"`
	ExpiresAt time.Time      `json:"expiresAt"`
}

// ErrorFrame reports a connection-level error (no request to answer).
type ErrorFrame struct {
	Type  string `json:"type"`
	Error Error  `json:"error"`
}

// UnsubscribedFrame ends a subscription the server dropped.
type UnsubscribedFrame struct {
	Type   string `json:"type"`
	Sub    string `json:"sub"`
	Reason string `json:"reason"`
}

// ReconnectFrame precedes a drain's close: reconnect (to any replica)
// after AfterMs.
type ReconnectFrame struct {
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	AfterMs int64  `json:"afterMs"`
}

// EventFrame carries one event of a subscription.
type EventFrame struct {
	Type  string `json:"type"`
	Sub   string `json:"sub"`
	Epoch string `json:"epoch"`
	Seq   int64  `json:"seq"`
	Kind  string `json:"kind"`
	// Version is the durable stream position after this event, on the
	// session events that end at one.
	Version int64 `json:"version,omitempty"`
	Payload any   `json:"payload"`
}
