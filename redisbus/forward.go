package redisbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ensemble-dev/ensemble/host"
)

// Router carries commands to the replica that owns a session
// (host.Forwarder) and serves the commands other replicas forward to this
// one. Requests go to the owner's Redis list (durable until taken, so a
// request is never lost between two replicas that are up); the owner
// acknowledges taking one and publishes the reply on the requester's
// reply channel. A request nobody took within PickupTimeout is withdrawn
// and reported host.ErrNotDelivered: nothing happened.
type Router struct {
	rdb     *redis.Client
	prefix  string
	self    string
	log     *slog.Logger
	handler func(context.Context, host.ForwardRequest) host.ForwardReply
	opts    RouterOptions

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ps     *redis.PubSub
	sem    chan struct{}

	mu      sync.Mutex
	waiting map[string]*pending
}

// RouterOptions tune a Router.
type RouterOptions struct {
	// PickupTimeout is how long a request may wait for the owner to take
	// it (default 2s).
	PickupTimeout time.Duration
	// Timeout bounds a forwarded call whose context has no deadline
	// (default 90s: longer than the Host's acceptance timeout).
	Timeout time.Duration
	// Concurrency bounds forwarded commands this replica runs at once
	// (default 256).
	Concurrency int
}

type pending struct {
	taken chan struct{}
	reply chan host.ForwardReply
	once  sync.Once
}

// request is what a requester pushes on the owner's list.
type request struct {
	ID       string              `json:"id"`
	From     string              `json:"from"`
	Deadline int64               `json:"deadline"` // unix ms
	Req      host.ForwardRequest `json:"req"`
}

// answer is what the owner publishes on the requester's reply channel.
type answer struct {
	ID    string             `json:"id"`
	Taken bool               `json:"taken,omitempty"`
	Reply *host.ForwardReply `json:"reply,omitempty"`
}

var _ host.Forwarder = (*Router)(nil)

// NewRouter starts serving forwarded commands for the Host epoch self with
// handler, on the bus's Redis. It waits until its reply channel is
// subscribed. Close stops it.
func (b *Bus) NewRouter(ctx context.Context, self string, handler func(context.Context, host.ForwardRequest) host.ForwardReply, opts RouterOptions) (*Router, error) {
	if opts.PickupTimeout <= 0 {
		opts.PickupTimeout = 2 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 90 * time.Second
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 256
	}
	rctx, cancel := context.WithCancel(context.Background())
	r := &Router{rdb: b.rdb, prefix: b.opts.Prefix, self: self, log: b.log, handler: handler, opts: opts,
		ctx: rctx, cancel: cancel, sem: make(chan struct{}, opts.Concurrency), waiting: map[string]*pending{}}
	r.ps = b.rdb.Subscribe(rctx, r.replyChannel(self))
	// Wait for the confirmation so no reply can be published before we
	// listen.
	sctx, scancel := context.WithTimeout(ctx, 5*time.Second)
	defer scancel()
	for {
		msg, err := r.ps.ReceiveTimeout(sctx, 5*time.Second)
		if err != nil {
			cancel()
			_ = r.ps.Close()
			return nil, fmt.Errorf("redisbus: subscribe reply channel: %w", err)
		}
		if _, ok := msg.(*redis.Subscription); ok {
			break
		}
	}
	r.wg.Add(2)
	go r.receiveReplies()
	go r.serve()
	return r, nil
}

func (r *Router) queue(epoch string) string        { return r.prefix + "rpc:" + epoch }
func (r *Router) replyChannel(epoch string) string { return r.prefix + "rpc-reply:" + epoch }

// Close stops serving and fails calls still waiting. Forwarded commands
// already running finish first.
func (r *Router) Close() error {
	r.cancel()
	err := r.ps.Close()
	r.wg.Wait()
	return err
}

// Forward implements host.Forwarder.
func (r *Router) Forward(ctx context.Context, owner string, req host.ForwardRequest) (host.ForwardReply, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(r.opts.Timeout)
	}
	id := host.RandomID("fw")
	data, err := json.Marshal(request{ID: id, From: r.self, Deadline: deadline.UnixMilli(), Req: req})
	if err != nil {
		return host.ForwardReply{}, err
	}
	p := &pending{taken: make(chan struct{}), reply: make(chan host.ForwardReply, 1)}
	r.mu.Lock()
	r.waiting[id] = p
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiting, id)
		r.mu.Unlock()
	}()

	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	q := r.queue(owner)
	pipe := r.rdb.TxPipeline()
	pipe.RPush(pctx, q, data)
	pipe.PExpire(pctx, q, time.Until(deadline)+time.Minute) // a dead owner's queue vanishes
	_, err = pipe.Exec(pctx)
	cancel()
	if err != nil {
		return host.ForwardReply{}, fmt.Errorf("%w: %v", host.ErrNotDelivered, err)
	}

	taken := p.taken
	pickup := time.NewTimer(r.opts.PickupTimeout)
	defer pickup.Stop()
	wait := time.NewTimer(time.Until(deadline))
	defer wait.Stop()
	for {
		select {
		case rep := <-p.reply:
			return rep, nil
		case <-taken:
			taken = nil // stop selecting on it
			pickup.Stop()
		case <-pickup.C:
			// Not taken in time: withdraw it. If it is gone from the list
			// the owner took it after all (its ack was lost): keep waiting.
			wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			n, err := r.rdb.LRem(wctx, q, 1, data).Result()
			cancel()
			if err == nil && n == 1 {
				return host.ForwardReply{}, fmt.Errorf("%w: owner %s did not take it within %s", host.ErrNotDelivered, owner, r.opts.PickupTimeout)
			}
		case <-wait.C:
			return host.ForwardReply{}, fmt.Errorf("redisbus: forwarded %s to %s: no reply before the deadline", req.Op, owner)
		case <-r.ctx.Done():
			return host.ForwardReply{}, errors.New("redisbus: router closed")
		}
	}
}

// receiveReplies hands acks and replies to the waiting Forward calls.
func (r *Router) receiveReplies() {
	defer r.wg.Done()
	fails := 0
	for {
		msg, err := r.ps.Receive(r.ctx)
		if r.ctx.Err() != nil {
			return
		}
		if err != nil {
			fails++
			sleepCtx(r.ctx, backoff(fails))
			continue
		}
		fails = 0
		m, ok := msg.(*redis.Message)
		if !ok {
			continue
		}
		var a answer
		if err := json.Unmarshal([]byte(m.Payload), &a); err != nil {
			continue
		}
		r.mu.Lock()
		p := r.waiting[a.ID]
		r.mu.Unlock()
		if p == nil {
			continue
		}
		if a.Taken {
			p.once.Do(func() { close(p.taken) })
		}
		if a.Reply != nil {
			select {
			case p.reply <- *a.Reply:
			default:
			}
		}
	}
}

// serve takes requests from this replica's list and runs them.
func (r *Router) serve() {
	defer r.wg.Done()
	var running sync.WaitGroup
	defer running.Wait()
	q := r.queue(r.self)
	fails := 0
	for {
		select {
		case r.sem <- struct{}{}:
		case <-r.ctx.Done():
			return
		}
		res, err := r.rdb.BLPop(r.ctx, time.Second, q).Result()
		if r.ctx.Err() != nil {
			<-r.sem
			return
		}
		if err != nil {
			<-r.sem
			if !errors.Is(err, redis.Nil) {
				fails++
				sleepCtx(r.ctx, backoff(fails))
			}
			continue
		}
		fails = 0
		var req request
		if err := json.Unmarshal([]byte(res[1]), &req); err != nil {
			<-r.sem
			r.log.Warn("redisbus: undecodable forwarded request", "err", err)
			continue
		}
		running.Add(1)
		go func() {
			defer running.Done()
			defer func() { <-r.sem }()
			r.answer(req.From, answer{ID: req.ID, Taken: true})
			ctx, cancel := context.WithDeadline(context.WithoutCancel(r.ctx), time.UnixMilli(req.Deadline))
			defer cancel()
			rep := r.handler(ctx, req.Req)
			r.answer(req.From, answer{ID: req.ID, Reply: &rep})
		}()
	}
}

func (r *Router) answer(to string, a answer) {
	data, err := json.Marshal(a)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.rdb.Publish(ctx, r.replyChannel(to), data).Err(); err != nil {
		r.log.Warn("redisbus: could not deliver a forwarded reply", "to", to, "err", err)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
