package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// RespondInteraction answers one exact interaction. The winner is decided
// at the canonical transition pending → answered, in the same transaction
// that prepares the durable runtime operation delivering it. A competing
// response identical to the winner is answered too; a different one, or any
// response to a request that is no longer pending, is superseded. No
// responder ever sees a conflict or in-progress error for losing a race.
func (h *Host) RespondInteraction(ctx context.Context, in RespondInput) (RespondResult, error) {
	ref := in.Ref
	if err := requireIDs(ref.WorkspaceID, ref.SessionID, ref.TurnID, ref.RequestID); err != nil {
		return RespondResult{}, err
	}
	resp, err := normalizeResponse(in.Response)
	if err != nil {
		return RespondResult{}, err
	}
	var out RespondResult
	for attempt := 0; ; attempt++ {
		out = RespondResult{}
		prepared := false
		err = h.commit(ctx, func(tx Tx, emit func(...Fact)) error {
			s, err := visibleSession(ctx, tx, ref.WorkspaceID, ref.SessionID)
			if err != nil {
				return err
			}
			it, err := tx.Interaction(ctx, ref)
			if err != nil {
				return err
			}
			if _, ok := it.option(resp.OptionID); !ok {
				return Errorf(CodeInvalidInput, "optionId %q is not one of the interaction's options", resp.OptionID)
			}
			switch it.State {
			case InteractionPending:
				t, err := tx.Turn(ctx, ref.WorkspaceID, ref.SessionID, ref.TurnID)
				if err != nil {
					return err
				}
				latest, err := tx.LatestTurn(ctx, ref.WorkspaceID, ref.SessionID)
				if err != nil {
					return err
				}
				now := h.nowUTC()
				if t.Settled() || latest.ID != t.ID {
					// An older turn's pending row is never actionable.
					it.State, it.Resolution, it.UpdatedAt = InteractionSuperseded, ResolutionTurnSettled, now
					if err := tx.UpdateInteraction(ctx, it, InteractionPending); err != nil {
						return err
					}
					if err := emitTree(ctx, tx, emit, s); err != nil {
						return err
					}
					out = RespondResult{Disposition: DispositionSuperseded, Interaction: it}
					return nil
				}
				opID := OperationIDFor(ref)
				it.State, it.Response, it.UpdatedAt = InteractionAnswered, &resp, now
				it.AnsweredBy, it.AnsweredByName, it.AnsweredAt = in.RespondedBy, in.RespondedByName, &now
				it.OperationID = opID
				if err := tx.UpdateInteraction(ctx, it, InteractionPending); err != nil {
					return err
				}
				op := RuntimeOperation{
					WorkspaceID: ref.WorkspaceID, ID: opID, Kind: OperationKindInteractionResponse,
					SessionID: ref.SessionID, TurnID: ref.TurnID, RequestID: ref.RequestID,
					Response: resp, RespondedBy: in.RespondedBy, RespondedByName: in.RespondedByName,
					State: OperationPrepared, NextAttemptAt: now, CreatedAt: now, UpdatedAt: now,
				}
				if err := tx.InsertRuntimeOperation(ctx, op); err != nil {
					return err
				}
				if err := emitTree(ctx, tx, emit, s); err != nil {
					return err
				}
				prepared = true
				out = RespondResult{Disposition: DispositionAnswered, Interaction: it}
			case InteractionAnswered:
				d := DispositionSuperseded
				if it.Response != nil && sameResponse(*it.Response, resp) {
					d = DispositionAnswered
				}
				out = RespondResult{Disposition: d, Interaction: it}
			default:
				out = RespondResult{Disposition: DispositionSuperseded, Interaction: it}
			}
			return nil
		})
		if (errors.Is(err, ErrConflict) || errors.Is(err, ErrDuplicate)) && attempt < respondRetries {
			continue // another responder moved the row first: decide again from it
		}
		if err != nil {
			return RespondResult{}, storeErr(err, "interaction %s", ref.RequestID)
		}
		if prepared {
			h.wakeOps()
		}
		return out, nil
	}
}

// normalizeResponse validates a response and compacts its payload so that
// identical responses compare equal byte for byte.
func normalizeResponse(r InteractionResponse) (InteractionResponse, error) {
	if err := requireIDs(r.OptionID); err != nil {
		return r, Errorf(CodeInvalidInput, "response.optionId is required (printable ASCII, at most %d bytes)", maxIDLen)
	}
	out := InteractionResponse{OptionID: r.OptionID}
	p := bytes.TrimSpace(r.Payload)
	if len(p) == 0 || bytes.Equal(p, []byte("null")) {
		return out, nil
	}
	if len(p) > maxPayloadBytes {
		return r, Errorf(CodeInvalidInput, "response.payload exceeds %d bytes", maxPayloadBytes)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, p); err != nil || !utf8.Valid(buf.Bytes()) {
		return r, Errorf(CodeInvalidInput, "response.payload must be valid JSON")
	}
	out.Payload = json.RawMessage(buf.Bytes())
	return out, nil
}

func sameResponse(a, b InteractionResponse) bool {
	if a.OptionID != b.OptionID {
		return false
	}
	return jsonEqual(a.Payload, b.Payload)
}

// jsonEqual compares two JSON values semantically (object key order does
// not matter); both empty is equal.
func jsonEqual(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return bytes.Equal(a, b)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}
