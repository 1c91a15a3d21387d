// Package host is the Agent Host: it owns every session and turn lifecycle
// decision. Adapters (stores, runtimes, transports) reach it only through the
// ports in ports*.go and the public methods of Host; host imports no adapter.
//
// Each file holds one capability:
//
//	host.go               Config, Open (validation), Host, Run; commit: one transaction plus its outbox facts
//	doc.go                this map
//
//	ports.go              the core ports: Store, Tx, Runtime, TurnSink, Observer
//	ports_*.go            the store and runtime parts of one capability (fork, interactions, output, ownership, queue, trash)
//	model.go              the canonical domain: Session, Turn, Message, SubmitClaim, Fact
//	api.go                command inputs and results
//	content.go            message content: normalisation, digest
//	errors.go             error codes and typed errors
//
//	queries.go            reads: sessions, turns, messages, interactions; id checks and store error mapping
//	changes.go            SessionChanges: what changed since a version, in one read
//	session.go            CreateSession, UpdateSession
//	settings.go           session settings and the workspace root
//	title.go              titles derived from the first prompt
//	send.go               SendInput: submit claims and admission
//	dispatch.go           dispatch to the runtime up to the acceptance barrier
//	sink.go               the turn sink: the fenced load every report starts with; phases, acceptance, terminal
//	output.go             the sink's streamed output: batching and transcript appends
//	delta.go              typed transcript deltas
//	sink_interactions.go  the sink's interaction, withdrawal and sub-agent reports
//	settle.go             the canonical terminal of a Turn, and waiting for it
//	cancel.go             CancelTurn
//	context.go            a lost provider session: ContinueFresh
//
//	queue.go              the message queue: admission of steering and follow-ups, retract, interrupt
//	steering.go           the steering pull cut and fail-stop
//	queue_handoff.go      the terminal handoff to the successor Turn
//
//	interactions.go       interactions and runtime operations: the domain types
//	respond.go            RespondInteraction
//	runops.go             the runtime-operation worker that delivers answers
//
//	goal_model.go         goals: domain types and store ports
//	goal.go               goal.control, goal reads, a session created with a goal
//	goal_loop.go          the goal worker: goal turns, their prompts and verdicts
//	goal_fence.go         goal fences, record quarantine, goal recovery
//	goal_provider.go      goals the agent reports (turn sink)
//
//	fork.go               the fork saga
//	delete.go             the delete saga: plan, quiesce, tombstones
//	release_retry.go      releasing a deleted session's runtime again
//	trash.go              the trash: list and restore
//	purge.go              purge and retention
//	export.go             session graph capture and restore
//
//	ownership.go          cluster session leases: ownership, the fence, takeover
//	forward.go            commands forwarded to the owner replica
//	reconcile.go          the turn reconciler
//	recover.go            startup recovery
//	written.go            what a transaction wrote, attached to its turn facts
//	publish.go            the post-commit publication fast path
//	relay.go              the outbox relay
//	relay_cluster.go      claimed relay reads across replicas
package host
