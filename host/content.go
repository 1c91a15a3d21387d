package host

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// MaxContentBytes bounds one message's model text plus display text.
const MaxContentBytes = 256 << 10

// MessageContent is the one canonical content shape from the wire to the
// store: model-facing text, optional human-facing display text, ordered
// attachment references and ordered quotes. Attachment bytes live elsewhere.
// Its JSON tags are the stored encoding (content columns), not the client
// protocol: clients get protocol.MessageContent.
type MessageContent struct {
	Text        string          `json:"text"`
	DisplayText string          `json:"displayText,omitempty"`
	Attachments []AttachmentRef `json:"attachments,omitempty"`
	Quotes      []Quote         `json:"quotes,omitempty"`
}

// AttachmentRef names an attachment stored outside the canonical record.
// Its JSON tags are the stored encoding (inside MessageContent), not the
// client protocol: clients get protocol.AttachmentRef.
type AttachmentRef struct {
	ID        string `json:"id"`
	Name      string `json:"name,omitempty"`
	MediaType string `json:"mediaType,omitempty"`
	Size      int64  `json:"size,omitempty"`
}

// Quote is a structured reference to earlier text the user quoted.
// Its JSON tags are the stored encoding (inside MessageContent), not the
// client protocol: clients get protocol.Quote.
type Quote struct {
	MessageID string `json:"messageId,omitempty"`
	Text      string `json:"text"`
}

// Normalize validates content and returns a detached copy in canonical form
// (empty slices become nil so equality and hashing do not depend on them).
func (c MessageContent) Normalize() (MessageContent, error) {
	if !utf8.ValidString(c.Text) || !utf8.ValidString(c.DisplayText) {
		return MessageContent{}, Errorf(CodeInvalidInput, "content must be valid UTF-8")
	}
	// PostgreSQL text cannot hold NUL; refusing it everywhere keeps both
	// stores answering the same request the same way.
	if strings.ContainsRune(c.Text, 0) || strings.ContainsRune(c.DisplayText, 0) {
		return MessageContent{}, Errorf(CodeInvalidInput, "content must not contain NUL characters")
	}
	if strings.TrimSpace(c.Text) == "" && len(c.Attachments) == 0 {
		return MessageContent{}, Errorf(CodeInvalidInput, "content.text must not be empty")
	}
	if len(c.Text)+len(c.DisplayText) > MaxContentBytes {
		return MessageContent{}, Errorf(CodeInvalidInput, "content exceeds %d bytes", MaxContentBytes)
	}
	if len(c.Attachments) > 64 || len(c.Quotes) > 64 {
		return MessageContent{}, Errorf(CodeInvalidInput, "at most 64 attachments and 64 quotes")
	}
	out := MessageContent{Text: c.Text, DisplayText: c.DisplayText}
	for i, a := range c.Attachments {
		if a.ID == "" {
			return MessageContent{}, Errorf(CodeInvalidInput, "attachments[%d].id is required", i)
		}
		out.Attachments = append(out.Attachments, a)
	}
	for i, q := range c.Quotes {
		if !utf8.ValidString(q.Text) || q.Text == "" || strings.ContainsRune(q.Text, 0) {
			return MessageContent{}, Errorf(CodeInvalidInput, "quotes[%d].text is required", i)
		}
		out.Quotes = append(out.Quotes, q)
	}
	return out, nil
}

// Digest is a stable fingerprint of normalized content, used to decide
// whether a retried ClientSubmitID carries the same payload.
func (c MessageContent) Digest() string {
	b, _ := json.Marshal(c)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Display is what a person sees: the display text when present.
func (c MessageContent) Display() string {
	if c.DisplayText != "" {
		return c.DisplayText
	}
	return c.Text
}
