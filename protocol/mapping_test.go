package protocol

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"slices"
	"testing"

	"github.com/ensemble-dev/ensemble/internal/testfill"
)

// fromFuncs are the domain → wire mappings.
var fromFuncs = []any{
	FromSession, FromTurn, FromMessage, FromInteraction, FromGoalState, FromAgentInfo,
	FromQueue, FromQueueEntry, FromCreateSessionResult, FromSessionPage, FromTurnPage,
	FromMessagePage, FromSendResult, FromCancelResult, FromRespondResult,
	FromRestoreGraphResult, FromDeleteSessionsResult, FromDeletedPage, FromRestoreResult,
	FromPurgeResult, FromGoalControlResult, FromRetractResult, FromInterruptResult,
	FromGoalSummary, FromTurnLabels, FromMessageContent, FromToolCall, FromInteractionOption,
	FromInteractionResponse, FromGoal, FromGoalObservation, FromDeletedComponent,
	FromDeletedSession, FromPurgedTree, FromPurgeCounts, FromGoalOperation,
	FromGoalProvenance, FromAttachmentRef, FromQuote, FromToolDiff, FromGoalSpec,
	FromTombstone,
}

var update = flag.Bool("update", false, "rewrite testdata/wire.golden.json from the mappings")

const goldenPath = "testdata/wire.golden.json"

// Every mapping encodes exactly as the domain value did when its tags were
// the protocol (testdata/wire.golden.json was written then, and checked
// equal to the domain encoding): same names, omitempty and
// null-vs-missing, for a zero value and for one with every field set.
func TestMappingKeepsTheEncoding(t *testing.T) {
	got := map[string]json.RawMessage{}
	for _, fn := range fromFuncs {
		f := reflect.ValueOf(fn)
		in := f.Type().In(0)
		for _, full := range []bool{false, true} {
			v := reflect.New(in).Elem()
			if full {
				testfill.Fill(v)
			}
			b, err := json.Marshal(f.Call([]reflect.Value{v})[0].Interface())
			if err != nil {
				t.Fatal(err)
			}
			got[fmt.Sprintf("%s/full=%v", in.Name(), full)] = b
		}
	}
	if *update {
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.WriteFile(goldenPath, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var want map[string]json.RawMessage
	if err := json.Unmarshal([]byte(readFile(t, goldenPath)), &want); err != nil {
		t.Fatal(err)
	}
	for k, w := range want {
		var c bytes.Buffer
		_ = json.Compact(&c, w)
		if !bytes.Equal(got[k], c.Bytes()) {
			t.Errorf("%s:\n got %s\nwant %s", k, got[k], c.Bytes())
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: not in %s (run with -update once its encoding is checked)", k, goldenPath)
		}
	}
}

// storageEncoded are the domain types whose JSON tags are another codec's
// (stored columns, export files, outbox facts, replies between replicas);
// each says so in its doc comment. Every other domain type that reaches
// clients carries no JSON tags: its encoding is protocol's alone.
var storageEncoded = []string{
	"Session", "Turn", "TurnLabels", "Message", "ToolCall", "ToolDiff", "MessageContent",
	"AttachmentRef", "Quote", "Interaction", "InteractionOption", "InteractionResponse",
	"AgentInfo", "GoalProvenance", "GoalSummary", "Goal", "GoalState", "GoalObservation",
	"GoalOperation", "GoalSpec", "QueueEntry", "SendResult", "CancelResult",
}

func TestWireOnlyDomainTypesHaveNoTags(t *testing.T) {
	for _, fn := range fromFuncs {
		in := reflect.ValueOf(fn).Type().In(0)
		tagged := false
		for i := range in.NumField() {
			if _, ok := in.Field(i).Tag.Lookup("json"); ok {
				tagged = true
			}
		}
		if allowed := slices.Contains(storageEncoded, in.Name()); tagged != allowed {
			t.Errorf("host.%s: has JSON tags %v, is a storage encoding %v", in.Name(), tagged, allowed)
		}
	}
}

// What a client sends maps onto the domain without losing a field: every
// To function undoes its From function.
func TestToHostUndoesFromHost(t *testing.T) {
	roundTrip(t, FromMessageContent, ToMessageContent)
	roundTrip(t, FromGoalSpec, ToGoalSpec)
	roundTrip(t, FromInteractionResponse, ToInteractionResponse)
}

func roundTrip[H, W any](t *testing.T, from func(H) W, to func(W) H) {
	t.Helper()
	var h H
	testfill.Fill(reflect.ValueOf(&h).Elem())
	if back := to(from(h)); !reflect.DeepEqual(back, h) {
		t.Errorf("%T: %+v came back as %+v", h, h, back)
	}
}
