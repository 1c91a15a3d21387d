package conformance

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ensemble-dev/ensemble/host"
)

// faultStore wraps the driver's store so scenarios can fail one exact write.
type faultStore struct {
	host.Store
	mu sync.Mutex
	// failTurnWrite, when set, is asked before every turn update.
	failTurnWrite func(t host.Turn) error
	// loseAck, when set, is asked after every committed transaction; true
	// reports the commit as unavailable although it is durable (a
	// connection lost during COMMIT).
	loseAck func() bool
	// loseQueueAck is loseAck for transactions that change a queue entry.
	loseQueueAck func() bool
	// calls records the store calls whose order recovery must keep.
	calls []string
	// sinkFault, when set, decides the fate of each transaction that
	// appends output or settles a Turn (n counts them from 0).
	sinkFault func(n int) sinkFault
	// holdOutput, when set, holds the next output transaction open (before
	// its commit) until the channel is closed; outputHeld is closed then.
	holdOutput, outputHeld chan struct{}
	// sinkTxs records each committed output transaction's Tx calls.
	sinkTxs []sinkTx
	nSink   int
	// failQueueReads makes GetQueueEntry fail unavailable (queue_scenarios.go).
	failQueueReads atomic.Bool
	// failClaimReads makes that many next GetClaim calls fail unavailable.
	failClaimReads atomic.Int64
	// failMessageReads makes that many next Tx.Message calls fail
	// unavailable (a read inside a write transaction that fails).
	failMessageReads atomic.Int64
	// dieAfter, when set, is asked after each committed transaction; true
	// kills the process right there: the commit is durable, but from then
	// on this store refuses every write and goal read, so the Host that
	// made it does nothing more (a crash at an exact saga step).
	dieAfter func(tx *faultTx) bool
	dead     atomic.Bool
	// failTombstones makes every SetTombstone fail with a store error, so
	// the delete's tombstone transaction rolls back (trash_scenarios.go).
	failTombstones atomic.Bool
	// unsettledAs, when set, rewrites the list UnsettledTurns returns (a
	// list read a moment earlier).
	unsettledAs func([]host.Turn) []host.Turn
}

var errProcessGone = fmt.Errorf("conformance: the process died here: %w", host.ErrUnavailable)

func (s *faultStore) dieAfterCommit(fn func(tx *faultTx) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dieAfter = fn
}

func (s *faultStore) GetGoalOperation(ctx context.Context, ws, csid string) (host.GoalOperation, error) {
	if s.dead.Load() {
		return host.GoalOperation{}, errProcessGone
	}
	return s.Store.GetGoalOperation(ctx, ws, csid)
}

func (s *faultStore) GetGoal(ctx context.Context, ws, sid string) (host.GoalState, error) {
	if s.dead.Load() {
		return host.GoalState{}, errProcessGone
	}
	return s.Store.GetGoal(ctx, ws, sid)
}

// sinkFault is what happens to one output or settle transaction.
type sinkFault int

const (
	sinkCommit     sinkFault = iota
	sinkFailBefore           // rolled back: unavailable before commit
	sinkAmbiguous            // committed, but reported unavailable
)

// sinkTx is one committed output transaction as the Host wrote it.
type sinkTx struct {
	calls    int // Tx method calls: one statement each
	messages int // AppendMessage calls
	settles  bool
}

// loseFirstSinkAck makes the first output or settle commit lose its
// acknowledgement (committed, reported unavailable).
func (s *faultStore) loseFirstSinkAck() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sinkFault = func(n int) sinkFault {
		if n == 0 {
			return sinkAmbiguous
		}
		return sinkCommit
	}
}

func (s *faultStore) outputTxs() []sinkTx {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sinkTx
	for _, t := range s.sinkTxs {
		if t.messages > 0 {
			out = append(out, t)
		}
	}
	return out
}

func (s *faultStore) onTurnWrite(fn func(t host.Turn) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failTurnWrite = fn
}

// onCommitted makes fn decide, after each successful commit, whether its
// acknowledgement is lost: the Host then sees ErrUnavailable for a write
// that is durable, the ambiguous commit every retried write must survive.
func (s *faultStore) onCommitted(fn func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseAck = fn
}

// firstOnly answers true once, then false: a lost acknowledgement for the
// next matching commit only.
func firstOnly() func() bool {
	var done atomic.Bool
	return func() bool { return done.CompareAndSwap(false, true) }
}

// onQueueCommitted is onCommitted for transactions that change a queue
// entry only, so a scenario can lose exactly a pull's acknowledgement
// while output commits go on around it.
func (s *faultStore) onQueueCommitted(fn func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.loseQueueAck = fn
}

func (s *faultStore) Update(ctx context.Context, fn func(host.Tx) error) error {
	if s.dead.Load() {
		return errProcessGone
	}
	s.mu.Lock()
	hook, loseAck, loseQueueAck, decide, die := s.failTurnWrite, s.loseAck, s.loseQueueAck, s.sinkFault, s.dieAfter
	s.mu.Unlock()
	var ft *faultTx
	fault := sinkCommit
	err := s.Store.Update(ctx, func(tx host.Tx) error {
		ft = &faultTx{Tx: tx, hook: hook, failTombstones: s.failTombstones.Load(), failMessageReads: &s.failMessageReads}
		if err := fn(ft); err != nil {
			return err
		}
		if !ft.sinkWrite() {
			return nil
		}
		s.mu.Lock()
		n := s.nSink
		s.nSink++
		hold, held := s.holdOutput, s.outputHeld
		if ft.appends > 0 {
			s.holdOutput, s.outputHeld = nil, nil
		} else {
			hold = nil
		}
		s.mu.Unlock()
		if hold != nil {
			close(held)
			<-hold
		}
		if decide != nil {
			fault = decide(n)
		}
		if fault == sinkFailBefore {
			return fmt.Errorf("conformance: connection lost before commit: %w", host.ErrUnavailable)
		}
		return nil
	})
	if err == nil && ft != nil && ft.sinkWrite() {
		s.mu.Lock()
		s.sinkTxs = append(s.sinkTxs, sinkTx{calls: ft.calls, messages: ft.appends, settles: ft.settles})
		s.mu.Unlock()
	}
	if err == nil && die != nil && ft != nil && die(ft) {
		s.dead.Store(true)
		return errProcessGone
	}
	queueAckLost := err == nil && ft != nil && ft.queueUpdated && loseQueueAck != nil && loseQueueAck()
	if err == nil && (fault == sinkAmbiguous || loseAck != nil && loseAck() || queueAckLost) {
		return fmt.Errorf("conformance: acknowledgement lost after commit: %w", host.ErrUnavailable)
	}
	return err
}

type faultTx struct {
	host.Tx
	hook func(t host.Turn) error
	// calls counts the Tx calls of the output path; appends and settles
	// mark a sink transaction.
	calls   int
	appends int
	settles bool
	// goalOpInserted and goalOpUpdated: the transaction wrote a goal
	// operation (dieAfter picks saga steps by them).
	goalOpInserted, goalOpUpdated bool
	failTombstones                bool
	queueUpdated                  bool // an UpdateQueueEntry call (onQueueCommitted)
	failMessageReads              *atomic.Int64
}

func (tx *faultTx) UpdateQueueEntry(ctx context.Context, e host.QueueEntry) (host.QueueEntry, error) {
	tx.queueUpdated = true
	return tx.Tx.UpdateQueueEntry(ctx, e)
}

var errTombstoneWrite = errors.New("conformance: the tombstone write failed")

func (tx *faultTx) SetTombstone(ctx context.Context, ws string, ids []string, tb *host.Tombstone) error {
	if tx.failTombstones {
		return errTombstoneWrite
	}
	return tx.Tx.SetTombstone(ctx, ws, ids, tb)
}

func (tx *faultTx) InsertGoalOperation(ctx context.Context, op host.GoalOperation) error {
	tx.goalOpInserted = true
	return tx.Tx.InsertGoalOperation(ctx, op)
}

func (tx *faultTx) UpdateGoalOperation(ctx context.Context, op host.GoalOperation) error {
	tx.goalOpUpdated = true
	return tx.Tx.UpdateGoalOperation(ctx, op)
}

func (tx *faultTx) sinkWrite() bool { return tx.appends > 0 || tx.settles }

func (tx *faultTx) Session(ctx context.Context, ws, id string) (host.Session, error) {
	tx.calls++
	return tx.Tx.Session(ctx, ws, id)
}

func (tx *faultTx) Turn(ctx context.Context, ws, sessionID, turnID string) (host.Turn, error) {
	tx.calls++
	return tx.Tx.Turn(ctx, ws, sessionID, turnID)
}

func (tx *faultTx) UpdateSession(ctx context.Context, s host.Session) error {
	tx.calls++
	return tx.Tx.UpdateSession(ctx, s)
}

func (tx *faultTx) ExpectOutput(ctx context.Context, ws, sessionID, turnID string, appliedSeq, messageVersion int64) error {
	tx.calls++
	return tx.Tx.ExpectOutput(ctx, ws, sessionID, turnID, appliedSeq, messageVersion)
}

func (tx *faultTx) AdvanceTurn(ctx context.Context, ws, sessionID, turnID string, seq int64, at time.Time) error {
	tx.calls++
	return tx.Tx.AdvanceTurn(ctx, ws, sessionID, turnID, seq, at)
}

func (tx *faultTx) AdvanceSession(ctx context.Context, ws, id string, version int64, at time.Time) error {
	tx.calls++
	return tx.Tx.AdvanceSession(ctx, ws, id, version, at)
}

func (tx *faultTx) Message(ctx context.Context, ws, sessionID, id string) (host.Message, error) {
	if n := tx.failMessageReads; n != nil && n.Add(-1) >= 0 {
		return host.Message{}, fmt.Errorf("conformance: message read failed: %w", host.ErrUnavailable)
	}
	return tx.Tx.Message(ctx, ws, sessionID, id)
}

func (tx *faultTx) AppendMessage(ctx context.Context, a host.MessageAppend) (host.AppendResult, error) {
	tx.calls++
	tx.appends++
	return tx.Tx.AppendMessage(ctx, a)
}

func (tx *faultTx) AppendFacts(ctx context.Context, facts ...host.Fact) ([]int64, error) {
	tx.calls++
	return tx.Tx.AppendFacts(ctx, facts...)
}

func (tx *faultTx) UpdateTurn(ctx context.Context, t host.Turn) error {
	tx.calls++
	tx.settles = tx.settles || t.Settled()
	if tx.hook != nil {
		if err := tx.hook(t); err != nil {
			return err
		}
	}
	return tx.Tx.UpdateTurn(ctx, t)
}

// probeRuntime counts provider dispatches and lets scenarios fail Start,
// hold a dispatch, or watch the sink.
type probeRuntime struct {
	host.Runtime
	dispatches atomic.Int64
	mu         sync.Mutex
	startErr   error
	// beforeDispatch runs before the inner Dispatch; returning an error
	// makes the dispatch fail without reaching the provider.
	beforeDispatch func(req host.DispatchRequest) error
	// wrapSink lets a scenario observe or reorder sink calls.
	wrapSink func(host.TurnSink) host.TurnSink
	// deliveries counts interaction answers handed to the inner runtime.
	deliveries atomic.Int64
	// holdDelivery, when set, holds every delivery until it is closed (or
	// the worker stops); deliveryHeld is told about each held delivery.
	holdDelivery chan struct{}
	deliveryHeld chan host.InteractionDelivery
	// loseAcks makes that many deliveries report an error after the inner
	// runtime delivered them (a lost acknowledgement).
	loseAcks int
	// failCancels makes that many Cancel calls fail without reaching the
	// inner runtime; cancels counts every Cancel call.
	failCancels int
	cancels     atomic.Int64
	// noSteering hides the inner runtime's steering capability;
	// muteSteering swallows steering notices (the agent never pulls
	// until a scenario calls notifySteering). queue_scenarios.go.
	noSteering, muteSteering bool
	// failReleases makes that many Release calls fail without reaching
	// the inner runtime; released counts the ones that reached it, per
	// session. trash_scenarios.go.
	failReleases int
	released     map[string]int
}

func (r *probeRuntime) Release(ctx context.Context, ws, sessionID string) error {
	r.mu.Lock()
	fail := r.failReleases > 0
	if fail {
		r.failReleases--
	} else {
		if r.released == nil {
			r.released = map[string]int{}
		}
		r.released[sessionID]++
	}
	r.mu.Unlock()
	if fail {
		return errors.New("conformance: release lost on the way to the agent")
	}
	return r.Runtime.Release(ctx, ws, sessionID)
}

func (r *probeRuntime) releases(sessionID string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.released[sessionID]
}

func (r *probeRuntime) Cancel(ctx context.Context, ref host.TurnRef) (host.CancelReport, error) {
	r.cancels.Add(1)
	r.mu.Lock()
	fail := r.failCancels > 0
	if fail {
		r.failCancels--
	}
	r.mu.Unlock()
	if fail {
		return host.CancelReport{}, errors.New("conformance: cancel lost on the way to the agent")
	}
	return r.Runtime.Cancel(ctx, ref)
}

func (r *probeRuntime) set(fn func(r *probeRuntime)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(r)
}

func (r *probeRuntime) Start(ctx context.Context, req host.StartRequest) (host.StartResult, error) {
	r.mu.Lock()
	err := r.startErr
	r.mu.Unlock()
	if err != nil {
		return host.StartResult{}, err
	}
	return r.Runtime.Start(ctx, req)
}

// Live hides the inner runtime's live session while Start is set to
// fail, so a submit goes through the failing Start.
func (r *probeRuntime) Live(ws, sessionID string) (string, bool) {
	r.mu.Lock()
	failing := r.startErr != nil
	r.mu.Unlock()
	if failing {
		return "", false
	}
	return r.Runtime.Live(ws, sessionID)
}

func (r *probeRuntime) Dispatch(ctx context.Context, req host.DispatchRequest, sink host.TurnSink) error {
	r.mu.Lock()
	before, wrap := r.beforeDispatch, r.wrapSink
	r.mu.Unlock()
	if before != nil {
		if err := before(req); err != nil {
			return err
		}
	}
	if wrap != nil {
		sink = wrap(sink)
	}
	r.dispatches.Add(1)
	return r.Runtime.Dispatch(ctx, req, sink)
}

// ---- interactions: forwarding, call order and delivery seams ----

func (s *faultStore) record(call string) {
	s.mu.Lock()
	s.calls = append(s.calls, call)
	s.mu.Unlock()
}

// callOrder returns the recorded store calls (recovery order checks).
func (s *faultStore) callOrder() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func (s *faultStore) is() (host.InteractionStore, error) {
	return s.Store, nil
}

func (s *faultStore) UnsettledTurns(ctx context.Context) ([]host.Turn, []host.Quarantined, error) {
	s.record("UnsettledTurns")
	ts, q, err := s.Store.UnsettledTurns(ctx)
	s.mu.Lock()
	rewrite := s.unsettledAs
	s.mu.Unlock()
	if rewrite != nil && err == nil {
		ts = rewrite(ts)
	}
	return ts, q, err
}

// listUnsettledAs makes UnsettledTurns return its list rewritten by fn
// (nil: as stored).
func (s *faultStore) listUnsettledAs(fn func([]host.Turn) []host.Turn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unsettledAs = fn
}

func (s *faultStore) GetInteraction(ctx context.Context, ref host.InteractionRef) (host.Interaction, error) {
	is, err := s.is()
	if err != nil {
		return host.Interaction{}, err
	}
	return is.GetInteraction(ctx, ref)
}

func (s *faultStore) InteractionTree(ctx context.Context, ws, root string) (host.InteractionTree, error) {
	is, err := s.is()
	if err != nil {
		return host.InteractionTree{}, err
	}
	return is.InteractionTree(ctx, ws, root)
}

func (s *faultStore) GetRuntimeOperation(ctx context.Context, ws, id string) (host.RuntimeOperation, error) {
	is, err := s.is()
	if err != nil {
		return host.RuntimeOperation{}, err
	}
	return is.GetRuntimeOperation(ctx, ws, id)
}

func (s *faultStore) DueRuntimeOperations(ctx context.Context, now time.Time, limit int) ([]host.RuntimeOperation, []host.Quarantined, error) {
	is, err := s.is()
	if err != nil {
		return nil, nil, err
	}
	return is.DueRuntimeOperations(ctx, now, limit)
}

func (s *faultStore) RequeueRuntimeOperations(ctx context.Context, replica string, now time.Time) (int, error) {
	s.record("RequeueRuntimeOperations")
	is, err := s.is()
	if err != nil {
		return 0, err
	}
	return is.RequeueRuntimeOperations(ctx, replica, now)
}

func (tx *faultTx) ix() (host.InteractionTx, error) {
	return tx.Tx, nil
}

func (tx *faultTx) Interaction(ctx context.Context, ref host.InteractionRef) (host.Interaction, error) {
	ix, err := tx.ix()
	if err != nil {
		return host.Interaction{}, err
	}
	return ix.Interaction(ctx, ref)
}

func (tx *faultTx) InsertInteraction(ctx context.Context, i host.Interaction) error {
	ix, err := tx.ix()
	if err != nil {
		return err
	}
	return ix.InsertInteraction(ctx, i)
}

func (tx *faultTx) UpdateInteraction(ctx context.Context, i host.Interaction, from host.InteractionState) error {
	ix, err := tx.ix()
	if err != nil {
		return err
	}
	return ix.UpdateInteraction(ctx, i, from)
}

func (tx *faultTx) TurnInteractions(ctx context.Context, ws, sessionID, turnID string) ([]host.Interaction, error) {
	ix, err := tx.ix()
	if err != nil {
		return nil, err
	}
	return ix.TurnInteractions(ctx, ws, sessionID, turnID)
}

func (tx *faultTx) LatestTurn(ctx context.Context, ws, sessionID string) (host.Turn, error) {
	ix, err := tx.ix()
	if err != nil {
		return host.Turn{}, err
	}
	return ix.LatestTurn(ctx, ws, sessionID)
}

func (tx *faultTx) RuntimeOperation(ctx context.Context, ws, id string) (host.RuntimeOperation, error) {
	ix, err := tx.ix()
	if err != nil {
		return host.RuntimeOperation{}, err
	}
	return ix.RuntimeOperation(ctx, ws, id)
}

func (tx *faultTx) InsertRuntimeOperation(ctx context.Context, op host.RuntimeOperation) error {
	ix, err := tx.ix()
	if err != nil {
		return err
	}
	return ix.InsertRuntimeOperation(ctx, op)
}

func (tx *faultTx) UpdateRuntimeOperation(ctx context.Context, op host.RuntimeOperation) error {
	ix, err := tx.ix()
	if err != nil {
		return err
	}
	return ix.UpdateRuntimeOperation(ctx, op)
}

// RespondInteraction counts deliveries that reach the driver's runtime and
// lets scenarios hold a delivery (until released or the worker stops) or
// lose its acknowledgement.
func (r *probeRuntime) RespondInteraction(ctx context.Context, d host.InteractionDelivery) (host.DeliveryReport, error) {
	r.mu.Lock()
	hold, held, loseAck := r.holdDelivery, r.deliveryHeld, r.loseAcks
	if loseAck > 0 {
		r.loseAcks--
	}
	r.mu.Unlock()
	if hold != nil {
		if held != nil {
			select {
			case held <- d:
			default:
			}
		}
		select {
		case <-hold:
		case <-ctx.Done():
			return host.DeliveryReport{}, ctx.Err()
		}
	}
	r.deliveries.Add(1)
	rep, err := r.Runtime.RespondInteraction(ctx, d)
	if err == nil && loseAck > 0 {
		// The runtime delivered, but the acknowledgement never arrives.
		return host.DeliveryReport{}, errors.New("conformance: delivery acknowledgement lost")
	}
	return rep, err
}
