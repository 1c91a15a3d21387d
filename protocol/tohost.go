package protocol

import "github.com/ensemble-dev/ensemble/host"

// The To functions map what a client sends onto the domain: message
// content, a goal and an interaction answer are the inputs that carry
// domain values.

// ToMessageContent maps submitted content onto the domain.
func ToMessageContent(c MessageContent) host.MessageContent {
	return host.MessageContent{
		Text:        c.Text,
		DisplayText: c.DisplayText,
		Attachments: mapSlice(c.Attachments, func(a AttachmentRef) host.AttachmentRef {
			return host.AttachmentRef{ID: a.ID, Name: a.Name, MediaType: a.MediaType, Size: a.Size}
		}),
		Quotes: mapSlice(c.Quotes, func(q Quote) host.Quote { return host.Quote{MessageID: q.MessageID, Text: q.Text} }),
	}
}

// ToGoalSpec maps a goal a client sets onto the domain.
func ToGoalSpec(g GoalSpec) host.GoalSpec {
	return host.GoalSpec{Objective: g.Objective, Criteria: g.Criteria, MaxTurns: g.MaxTurns, MaxDuration: g.MaxDuration}
}

// ToInteractionResponse maps an interaction answer onto the domain.
func ToInteractionResponse(r InteractionResponse) host.InteractionResponse {
	return host.InteractionResponse{OptionID: r.OptionID, Payload: r.Payload}
}

// ToHost maps an optional input value with f; nil stays nil.
func ToHost[A, B any](p *A, f func(A) B) *B { return mapPtr(p, f) }
