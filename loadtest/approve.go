package loadtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ensemble-dev/ensemble/auth"
)

type interactionWire struct {
	SessionID string `json:"sessionId"`
	TurnID    string `json:"turnId"`
	RequestID string `json:"requestId"`
	State     string `json:"state"`
	Options   []struct {
		ID string `json:"optionId"`
	} `json:"options"`
	Response *struct {
		OptionID string `json:"optionId"`
	} `json:"response"`
	CreatedAt time.Time `json:"createdAt"`
}

// race is what every responder did about one interaction.
type race struct {
	answered, superseded, failed int
	late                         int // responders whose first view was already decided
	answeredOpts                 map[string]int
	winner                       string // the canonical response the server returned
	visible                      time.Time
}

var outcomeRe = regexp.MustCompile(`Permission outcome: selected "[^"]*" \(([^)]+)\)`)

// approve: N member watchers per session race to answer every permission
// request of sessions that stream "/sim permission" answers. Each responder
// picks an option by its index, so the race has real losers. Checks: every
// response is answered or superseded; all answered responses carry the
// winning option; and the agent's own text reports exactly that option.
func (r *runner) approve(ctx context.Context) *Result {
	c := r.cfg
	res := &Result{Name: "approve"}
	ws := r.workspace("ap", 0)
	d0, err := newDriver(ctx, r.addrs[0], r.token("lt-driver", auth.RoleMember, ws))
	if err != nil {
		res.Skipped = "driver: " + err.Error()
		return res
	}
	err = d0.c.Call(ctx, "interaction.respond", map[string]any{"workspace": ws, "sessionId": "ses_none",
		"turnId": "turn_none", "requestId": "req_none", "response": map[string]any{"optionId": "allow"}}, nil)
	d0.c.Close()
	var we *WireError
	if errors.As(err, &we) && we.Code == "unsupported" {
		res.Skipped = "not yet possible: this server answers interaction.respond \"unsupported\" (interactions are not implemented yet)"
		return res
	}
	nSess := max(1, c.Sessions)
	n := c.Watchers
	res.param("sessions", nSess)
	res.param("responders", n)
	res.param("replicas", len(r.addrs))
	var phase atomic.Value
	phase.Store("connecting")
	var responses atomic.Int64
	r.progress.set(func() string { return fmt.Sprintf("approve %s: %d responses", phase.Load(), responses.Load()) })

	var drivers []*driver
	var sids []string
	defer func() {
		for _, d := range drivers {
			d.c.Close()
		}
	}()
	for k := range nSess {
		d, err := newDriver(ctx, r.addr(k), r.token("lt-driver", auth.RoleMember, ws))
		if err != nil {
			res.Skipped = "driver: " + err.Error()
			return res
		}
		drivers = append(drivers, d)
		sid, err := d.createSession(ctx, ws)
		if err != nil {
			res.Skipped = err.Error()
			return res
		}
		sids = append(sids, sid)
	}

	var mu sync.Mutex
	races := map[string]*race{}
	respLat, visLat := NewLatency(), NewLatency()
	tl := NewTimeline()
	codes := newCodeCounter()
	var inflight sync.WaitGroup
	responders := make([]*Client, n)
	tok := r.token("lt-responder", auth.RoleMember, ws)
	_, err = dialMany(ctx, n, 16, nil, func(ctx context.Context, j int) (*Client, error) {
		seen := map[string]bool{}
		var cl *Client
		on := func(ev *Event, at time.Time) {
			if ev.Kind != "interaction_snapshot" {
				return
			}
			var p struct {
				Interactions []interactionWire `json:"interactions"`
			}
			if json.Unmarshal(ev.Payload, &p) != nil {
				return
			}
			for _, it := range p.Interactions {
				key := it.SessionID + "/" + it.TurnID + "/" + it.RequestID
				if seen[key] {
					continue
				}
				seen[key] = true
				if it.State != "pending" || len(it.Options) == 0 {
					// Decided before this responder saw it (on another
					// replica the hub may reread after the race is over).
					mu.Lock()
					if races[key] == nil {
						races[key] = &race{answeredOpts: map[string]int{}, visible: at}
					}
					races[key].late++
					mu.Unlock()
					continue
				}
				visLat.Record(at.Sub(it.CreatedAt))
				opt := it.Options[j%len(it.Options)].ID
				mu.Lock()
				if races[key] == nil {
					races[key] = &race{answeredOpts: map[string]int{}, visible: at}
				}
				mu.Unlock()
				inflight.Add(1)
				go func() {
					defer inflight.Done()
					var out struct {
						Disposition string          `json:"disposition"`
						Interaction interactionWire `json:"interaction"`
					}
					t0 := time.Now()
					err := cl.Call(ctx, "interaction.respond", map[string]any{"workspace": ws, "sessionId": it.SessionID,
						"turnId": it.TurnID, "requestId": it.RequestID, "response": map[string]any{"optionId": opt}}, &out)
					respLat.Record(time.Since(t0))
					tl.Add(1)
					responses.Add(1)
					mu.Lock()
					defer mu.Unlock()
					rc := races[key]
					switch {
					case err != nil:
						rc.failed++
						codes.add(err)
					case out.Disposition == "answered":
						rc.answered++
						rc.answeredOpts[opt]++
					case out.Disposition == "superseded":
						rc.superseded++
					default:
						rc.failed++
					}
					if err == nil && out.Interaction.Response != nil {
						if rc.winner != "" && rc.winner != out.Interaction.Response.OptionID {
							rc.winner = "conflict:" + rc.winner + "/" + out.Interaction.Response.OptionID
						} else if rc.winner == "" {
							rc.winner = out.Interaction.Response.OptionID
						}
					}
				}()
			}
		}
		var err error
		cl, err = Dial(ctx, r.addr(j), tok, DialOptions{OnEvent: on})
		if err != nil {
			return nil, err
		}
		for _, sid := range sids {
			if _, err := cl.Subscribe(ctx, ws, sid, nil); err != nil {
				cl.Drop()
				return nil, err
			}
		}
		responders[j] = cl
		return cl, nil
	})
	defer func() {
		for _, cl := range responders {
			if cl != nil {
				cl.Drop()
			}
		}
	}()
	if err != nil {
		res.Skipped = "responders could not connect: " + err.Error()
		return res
	}

	phase.Store("racing")
	var turns, turnErrs atomic.Int64
	start := time.Now()
	deadline := start.Add(c.Duration)
	var wg sync.WaitGroup
	for k, d := range drivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for m := 0; time.Now().Before(deadline) && ctx.Err() == nil; m++ {
				tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				tid, err := d.submit(tctx, ws, sids[k], fmt.Sprintf("lt-%s-ap-%d-%d", r.id, k, m), fmt.Sprintf("/sim permission rate=1ms\napprove load %d", m))
				if err == nil {
					err = d.wait(tctx, tid)
				}
				cancel()
				if err != nil {
					turnErrs.Add(1)
					codes.add(err)
					if errors.Is(err, ErrClosed) {
						return
					}
					time.Sleep(50 * time.Millisecond)
					continue
				}
				turns.Add(1)
			}
		}()
	}
	wg.Wait()
	inflight.Wait()
	elapsed := time.Since(start)

	// What the agent itself reported, per turn.
	reported := map[string]string{}
	for k, d := range drivers {
		ms, err := d.messages(ctx, ws, sids[k])
		if err != nil {
			res.note("message.list: %v", err)
			continue
		}
		for _, m := range ms {
			if mm := outcomeRe.FindStringSubmatch(m.Content.Text); m.Role == "agent" && mm != nil {
				reported[sids[k]+"/"+m.TurnID] = mm[1]
			}
		}
	}
	mu.Lock()
	var winners, superseded, answered, failed, bad, mismatched, total, late int
	for key, rc := range races {
		total += rc.answered + rc.superseded + rc.failed
		answered += rc.answered
		superseded += rc.superseded
		failed += rc.failed
		late += rc.late
		if rc.answered > 0 {
			winners++
		}
		// Every answered response carries the winning option, and there is one.
		// Every responder answered or saw it decided first.
		if len(rc.answeredOpts) != 1 || rc.answeredOpts[rc.winner] != rc.answered || rc.answered+rc.superseded+rc.failed+rc.late != n {
			bad++
		}
		var sid, tid string
		if parts := splitKey(key); len(parts) == 3 {
			sid, tid = parts[0], parts[1]
		}
		if got, ok := reported[sid+"/"+tid]; !ok || got != rc.winner {
			mismatched++
		}
	}
	interactions := len(races)
	mu.Unlock()

	res.Seconds = elapsed.Seconds()
	res.series("interaction.respond round trip", false, respLat, tl, elapsed.Seconds(), "responses")
	res.series("interaction created → visible to a responder", false, visLat, nil, elapsed.Seconds(), "")
	res.count("turns", turns.Load())
	res.count("interactions", interactions)
	res.count("responses", total)
	res.count("answered (won, or identical to the winner)", answered)
	res.count("superseded", superseded)
	res.count("failed", failed)
	res.count("seen only after the race was decided", late)
	res.count("interactions with a winner", winners)
	res.count("turn errors", turnErrs.Load())
	if s := codes.String(); s != "" {
		res.count("error codes", s)
	}
	res.check("one winner per interaction", winners == interactions && interactions > 0, "%d winners for %d interactions", winners, interactions)
	res.check("responses add up", total+late == interactions*n && failed == 0 && bad == 0,
		"%d answered + %d superseded + %d failed + %d seen already decided = %d for %d interactions × %d responders; %d races inconsistent",
		answered, superseded, failed, late, total+late, interactions, n, bad)
	res.check("the agent got the winning answer", mismatched == 0, "%d of %d turns report another option than the winner", mismatched, interactions)
	res.note("No reference server: the race is decided by one durable transaction per response; compare the round trip with pgbench -N's latency on the same machine.")
	res.note("Responder j answers with option j mod the number of options, so about half lose each race; \"answered\" counts the winner and responses identical to it.")
	return res
}

func splitKey(k string) []string {
	var out []string
	start := 0
	for i := 0; i < len(k); i++ {
		if k[i] == '/' {
			out = append(out, k[start:i])
			start = i + 1
		}
	}
	return append(out, k[start:])
}
