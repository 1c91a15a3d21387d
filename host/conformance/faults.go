package conformance

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/ensemble-dev/ensemble/host"
)

// faultStore wraps the driver's store so scenarios can fail one exact write.
type faultStore struct {
	host.Store
	mu sync.Mutex
	// failTurnWrite, when set, is asked before every turn update.
	failTurnWrite func(t host.Turn) error
}

func (s *faultStore) onTurnWrite(fn func(t host.Turn) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failTurnWrite = fn
}

func (s *faultStore) Update(ctx context.Context, fn func(host.Tx) error) error {
	s.mu.Lock()
	hook := s.failTurnWrite
	s.mu.Unlock()
	return s.Store.Update(ctx, func(tx host.Tx) error {
		return fn(&faultTx{Tx: tx, hook: hook})
	})
}

type faultTx struct {
	host.Tx
	hook func(t host.Turn) error
}

func (tx *faultTx) UpdateTurn(ctx context.Context, t host.Turn) error {
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
