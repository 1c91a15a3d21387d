package protocol

import "github.com/ensemble-dev/ensemble/host"

// FromSession maps host.Session onto the wire.
func FromSession(v host.Session) Session {
	return Session{
		WorkspaceID:       v.WorkspaceID,
		ID:                v.ID,
		ParentID:          v.ParentID,
		RootID:            v.RootID,
		Title:             v.Title,
		TitleExplicit:     v.TitleExplicit,
		Agent:             v.Agent,
		Simulated:         v.Simulated,
		Settings:          v.Settings,
		Pinned:            v.Pinned,
		ProviderSessionID: v.ProviderSessionID,
		MessageVersion:    v.MessageVersion,
		TurnCount:         v.TurnCount,
		ActiveTurnID:      v.ActiveTurnID,
		ContextLost:       v.ContextLost,
		CreatedBy:         v.CreatedBy,
		CreatedAt:         v.CreatedAt,
		UpdatedAt:         v.UpdatedAt,
		DeletedAt:         v.DeletedAt,
		Goal:              mapPtr(v.Goal, FromGoalSummary),
	}
}

// FromTurn maps host.Turn onto the wire.
func FromTurn(v host.Turn) Turn {
	return Turn{
		WorkspaceID:          v.WorkspaceID,
		SessionID:            v.SessionID,
		ID:                   v.ID,
		Seq:                  v.Seq,
		Origin:               v.Origin,
		Phase:                v.Phase,
		Outcome:              v.Outcome,
		FailureReason:        v.FailureReason,
		StopReason:           v.StopReason,
		ProviderSessionID:    v.ProviderSessionID,
		ProviderTurnID:       v.ProviderTurnID,
		ClientSubmitID:       v.ClientSubmitID,
		IdentityAnchorTurnID: v.IdentityAnchorTurnID,
		Retracted:            v.Retracted,
		CancelRequested:      v.CancelRequested,
		SubmittedBy:          v.SubmittedBy,
		TurnLabels:           FromTurnLabels(v.TurnLabels),
		CreatedAt:            v.CreatedAt,
		UpdatedAt:            v.UpdatedAt,
		SettledAt:            v.SettledAt,
	}
}

// FromMessage maps host.Message onto the wire.
func FromMessage(v host.Message) Message {
	return Message{
		WorkspaceID: v.WorkspaceID,
		SessionID:   v.SessionID,
		ID:          v.ID,
		TurnID:      v.TurnID,
		Role:        v.Role,
		Kind:        v.Kind,
		Version:     v.Version,
		Ordinal:     v.Ordinal,
		Content:     FromMessageContent(v.Content),
		Tool:        mapPtr(v.Tool, FromToolCall),
		Streaming:   v.Streaming,
		Author:      v.Author,
		AuthorName:  v.AuthorName,
		CreatedAt:   v.CreatedAt,
		UpdatedAt:   v.UpdatedAt,
	}
}

// FromInteraction maps host.Interaction onto the wire.
func FromInteraction(v host.Interaction) Interaction {
	return Interaction{
		WorkspaceID:    v.WorkspaceID,
		SessionID:      v.SessionID,
		TurnID:         v.TurnID,
		RequestID:      v.RequestID,
		RootSessionID:  v.RootSessionID,
		Kind:           v.Kind,
		Title:          v.Title,
		Prompt:         v.Prompt,
		Options:        mapSlice(v.Options, FromInteractionOption),
		Tool:           mapPtr(v.Tool, FromToolCall),
		State:          v.State,
		Response:       mapPtr(v.Response, FromInteractionResponse),
		AnsweredBy:     v.AnsweredBy,
		AnsweredByName: v.AnsweredByName,
		AnsweredAt:     v.AnsweredAt,
		Resolution:     v.Resolution,
		OperationID:    v.OperationID,
		CreatedAt:      v.CreatedAt,
		UpdatedAt:      v.UpdatedAt,
	}
}

// FromGoalState maps host.GoalState onto the wire.
func FromGoalState(v host.GoalState) GoalState {
	return GoalState{
		WorkspaceID:   v.WorkspaceID,
		SessionID:     v.SessionID,
		Revision:      v.Revision,
		Seq:           v.Seq,
		RevisedAtTurn: v.RevisedAtTurn,
		Goal:          mapPtr(v.Goal, FromGoal),
		Observed:      mapPtr(v.Observed, FromGoalObservation),
		UpdatedAt:     v.UpdatedAt,
		Held:          v.Held,
	}
}

// FromAgentInfo maps host.AgentInfo onto the wire.
func FromAgentInfo(v host.AgentInfo) AgentInfo {
	return AgentInfo{
		Name:       v.Name,
		Version:    v.Version,
		Simulated:  v.Simulated,
		Fork:       v.Fork,
		ForkReason: v.ForkReason,
	}
}

// FromQueue maps host.Queue onto the wire.
func FromQueue(v host.Queue) Queue {
	return Queue{
		Revision:    v.Revision,
		FenceTurnID: v.FenceTurnID,
		Entries:     mapSlice(v.Entries, FromQueueEntry),
		Steering:    v.Steering,
	}
}

// FromQueueEntry maps host.QueueEntry onto the wire.
func FromQueueEntry(v host.QueueEntry) QueueEntry {
	return QueueEntry{
		WorkspaceID:      v.WorkspaceID,
		SessionID:        v.SessionID,
		ID:               v.ID,
		Position:         v.Position,
		Disposition:      v.Disposition,
		State:            v.State,
		ClientSubmitID:   v.ClientSubmitID,
		Author:           v.Author,
		AuthorName:       v.AuthorName,
		Content:          FromMessageContent(v.Content),
		TargetTurnID:     v.TargetTurnID,
		TurnID:           v.TurnID,
		AdmittedRevision: v.AdmittedRevision,
		Revision:         v.Revision,
		RetractedBy:      v.RetractedBy,
		CreatedAt:        v.CreatedAt,
		UpdatedAt:        v.UpdatedAt,
	}
}

// FromCreateSessionResult maps host.CreateSessionResult onto the wire.
func FromCreateSessionResult(v host.CreateSessionResult) CreateSessionResult {
	return CreateSessionResult{
		Session: FromSession(v.Session),
		Turn:    mapPtr(v.Turn, FromTurn),
		Goal:    mapPtr(v.Goal, FromGoalControlResult),
	}
}

// FromSessionPage maps host.SessionPage onto the wire.
func FromSessionPage(v host.SessionPage) SessionPage {
	return SessionPage{
		Sessions:   mapSlice(v.Sessions, FromSession),
		NextCursor: v.NextCursor,
	}
}

// FromTurnPage maps host.TurnPage onto the wire.
func FromTurnPage(v host.TurnPage) TurnPage {
	return TurnPage{
		Turns:      mapSlice(v.Turns, FromTurn),
		HasMore:    v.HasMore,
		NextCursor: v.NextCursor,
	}
}

// FromMessagePage maps host.MessagePage onto the wire.
func FromMessagePage(v host.MessagePage) MessagePage {
	return MessagePage{
		Messages: mapSlice(v.Messages, FromMessage),
		HasMore:  v.HasMore,
	}
}

// FromSendResult maps host.SendResult onto the wire.
func FromSendResult(v host.SendResult) SendResult {
	return SendResult{
		Disposition:   v.Disposition,
		Turn:          mapPtr(v.Turn, FromTurn),
		Replayed:      v.Replayed,
		Entry:         mapPtr(v.Entry, FromQueueEntry),
		QueueRevision: v.QueueRevision,
	}
}

// FromCancelResult maps host.CancelResult onto the wire.
func FromCancelResult(v host.CancelResult) CancelResult {
	return CancelResult{
		IntentAccepted:    v.IntentAccepted,
		ProviderConfirmed: v.ProviderConfirmed,
		Settled:           v.Settled,
		Turn:              FromTurn(v.Turn),
	}
}

// FromRespondResult maps host.RespondResult onto the wire.
func FromRespondResult(v host.RespondResult) RespondResult {
	return RespondResult{
		Disposition: v.Disposition,
		Interaction: FromInteraction(v.Interaction),
	}
}

// FromRestoreGraphResult maps host.RestoreGraphResult onto the wire.
func FromRestoreGraphResult(v host.RestoreGraphResult) RestoreGraphResult {
	return RestoreGraphResult{
		Sessions: v.Sessions,
		Created:  v.Created,
	}
}

// FromDeleteSessionsResult maps host.DeleteSessionsResult onto the wire.
func FromDeleteSessionsResult(v host.DeleteSessionsResult) DeleteSessionsResult {
	return DeleteSessionsResult{
		DeletedSessionIDs: v.DeletedSessionIDs,
		Components:        mapSlice(v.Components, FromDeletedComponent),
		CleanupFailures:   v.CleanupFailures,
	}
}

// FromDeletedPage maps host.DeletedPage onto the wire.
func FromDeletedPage(v host.DeletedPage) DeletedPage {
	return DeletedPage{
		Sessions:   mapSlice(v.Sessions, FromDeletedSession),
		NextCursor: v.NextCursor,
	}
}

// FromRestoreResult maps host.RestoreResult onto the wire.
func FromRestoreResult(v host.RestoreResult) RestoreResult {
	return RestoreResult{
		Session:            FromSession(v.Session),
		RestoredSessionIDs: v.RestoredSessionIDs,
		Restored:           v.Restored,
	}
}

// FromPurgeResult maps host.PurgeResult onto the wire.
func FromPurgeResult(v host.PurgeResult) PurgeResult {
	return PurgeResult{
		Purged: mapSlice(v.Purged, FromPurgedTree),
		Kept:   v.Kept,
		Counts: FromPurgeCounts(v.Counts),
	}
}

// FromGoalControlResult maps host.GoalControlResult onto the wire.
func FromGoalControlResult(v host.GoalControlResult) GoalControlResult {
	return GoalControlResult{
		Goal:           mapPtr(v.Goal, FromGoal),
		State:          FromGoalState(v.State),
		IntentAccepted: v.IntentAccepted,
		Operation:      FromGoalOperation(v.Operation),
		Replayed:       v.Replayed,
	}
}

// FromRetractResult maps host.RetractResult onto the wire.
func FromRetractResult(v host.RetractResult) RetractResult {
	return RetractResult{
		Entry:         FromQueueEntry(v.Entry),
		QueueRevision: v.QueueRevision,
	}
}

// FromInterruptResult maps host.InterruptResult onto the wire.
func FromInterruptResult(v host.InterruptResult) InterruptResult {
	return InterruptResult{
		Turn: FromTurn(v.Turn),
	}
}

// FromGoalSummary maps host.GoalSummary onto the wire.
func FromGoalSummary(v host.GoalSummary) GoalSummary {
	return GoalSummary{
		Status:    v.Status,
		Objective: v.Objective,
		Held:      v.Held,
	}
}

// FromTurnLabels maps host.TurnLabels onto the wire.
func FromTurnLabels(v host.TurnLabels) TurnLabels {
	return TurnLabels{
		SubmittedByName: v.SubmittedByName,
		CanceledBy:      v.CanceledBy,
		CanceledByName:  v.CanceledByName,
		CancelReason:    v.CancelReason,
		Agent:           mapPtr(v.Agent, FromAgentInfo),
		Goal:            mapPtr(v.Goal, FromGoalProvenance),
	}
}

// FromMessageContent maps host.MessageContent onto the wire.
func FromMessageContent(v host.MessageContent) MessageContent {
	return MessageContent{
		Text:        v.Text,
		DisplayText: v.DisplayText,
		Attachments: mapSlice(v.Attachments, FromAttachmentRef),
		Quotes:      mapSlice(v.Quotes, FromQuote),
	}
}

// FromToolCall maps host.ToolCall onto the wire.
func FromToolCall(v host.ToolCall) ToolCall {
	return ToolCall{
		ID:     v.ID,
		Title:  v.Title,
		Kind:   v.Kind,
		Status: v.Status,
		Input:  v.Input,
		Output: v.Output,
		Diffs:  mapSlice(v.Diffs, FromToolDiff),
	}
}

// FromInteractionOption maps host.InteractionOption onto the wire.
func FromInteractionOption(v host.InteractionOption) InteractionOption {
	return InteractionOption{
		ID:   v.ID,
		Name: v.Name,
		Kind: v.Kind,
	}
}

// FromInteractionResponse maps host.InteractionResponse onto the wire.
func FromInteractionResponse(v host.InteractionResponse) InteractionResponse {
	return InteractionResponse{
		OptionID: v.OptionID,
		Payload:  v.Payload,
	}
}

// FromGoal maps host.Goal onto the wire.
func FromGoal(v host.Goal) Goal {
	return Goal{
		GoalSpec:      FromGoalSpec(v.GoalSpec),
		Status:        v.Status,
		Revision:      v.Revision,
		Generation:    v.Generation,
		OperationID:   v.OperationID,
		Source:        v.Source,
		SetBy:         v.SetBy,
		SetByName:     v.SetByName,
		PausedBy:      v.PausedBy,
		PausedByName:  v.PausedByName,
		TurnsUsed:     v.TurnsUsed,
		ActiveTurnID:  v.ActiveTurnID,
		ArmedRevision: v.ArmedRevision,
		EndReason:     v.EndReason,
		StartedAt:     v.StartedAt,
		UpdatedAt:     v.UpdatedAt,
	}
}

// FromGoalObservation maps host.GoalObservation onto the wire.
func FromGoalObservation(v host.GoalObservation) GoalObservation {
	return GoalObservation{
		Status:    v.Status,
		Objective: v.Objective,
		Summary:   v.Summary,
		TurnID:    v.TurnID,
		Revision:  v.Revision,
		At:        v.At,
	}
}

// FromDeletedComponent maps host.DeletedComponent onto the wire.
func FromDeletedComponent(v host.DeletedComponent) DeletedComponent {
	return DeletedComponent{
		RootSessionID: v.RootSessionID,
		Generation:    v.Generation,
		SessionIDs:    v.SessionIDs,
		Restorable:    v.Restorable,
	}
}

// FromDeletedSession maps host.DeletedSession onto the wire.
func FromDeletedSession(v host.DeletedSession) DeletedSession {
	return DeletedSession{
		Session:   FromSession(v.Session),
		Tombstone: FromTombstone(v.Tombstone),
	}
}

// FromPurgedTree maps host.PurgedTree onto the wire.
func FromPurgedTree(v host.PurgedTree) PurgedTree {
	return PurgedTree{
		WorkspaceID:   v.WorkspaceID,
		RootSessionID: v.RootSessionID,
		DeletedAt:     v.DeletedAt,
		SessionIDs:    v.SessionIDs,
	}
}

// FromPurgeCounts maps host.PurgeCounts onto the wire.
func FromPurgeCounts(v host.PurgeCounts) PurgeCounts {
	return PurgeCounts{
		Sessions:     v.Sessions,
		Turns:        v.Turns,
		Messages:     v.Messages,
		Interactions: v.Interactions,
	}
}

// FromGoalOperation maps host.GoalOperation onto the wire.
func FromGoalOperation(v host.GoalOperation) GoalOperation {
	return GoalOperation{
		WorkspaceID:    v.WorkspaceID,
		ClientSubmitID: v.ClientSubmitID,
		ID:             v.ID,
		SessionID:      v.SessionID,
		Action:         v.Action,
		Digest:         v.Digest,
		Spec:           mapPtr(v.Spec, FromGoalSpec),
		Revision:       v.Revision,
		State:          v.State,
		Error:          v.Error,
		By:             v.By,
		ByName:         v.ByName,
		CreatedAt:      v.CreatedAt,
		UpdatedAt:      v.UpdatedAt,
	}
}

// FromGoalProvenance maps host.GoalProvenance onto the wire.
func FromGoalProvenance(v host.GoalProvenance) GoalProvenance {
	return GoalProvenance{
		Kind:        v.Kind,
		OperationID: v.OperationID,
		Revision:    v.Revision,
		Generation:  v.Generation,
		Number:      v.Number,
	}
}

// FromAttachmentRef maps host.AttachmentRef onto the wire.
func FromAttachmentRef(v host.AttachmentRef) AttachmentRef {
	return AttachmentRef{
		ID:        v.ID,
		Name:      v.Name,
		MediaType: v.MediaType,
		Size:      v.Size,
	}
}

// FromQuote maps host.Quote onto the wire.
func FromQuote(v host.Quote) Quote {
	return Quote{
		MessageID: v.MessageID,
		Text:      v.Text,
	}
}

// FromToolDiff maps host.ToolDiff onto the wire.
func FromToolDiff(v host.ToolDiff) ToolDiff {
	return ToolDiff{
		Path:    v.Path,
		OldText: v.OldText,
		NewText: v.NewText,
	}
}

// FromGoalSpec maps host.GoalSpec onto the wire.
func FromGoalSpec(v host.GoalSpec) GoalSpec {
	return GoalSpec{
		Objective:   v.Objective,
		Criteria:    v.Criteria,
		MaxTurns:    v.MaxTurns,
		MaxDuration: v.MaxDuration,
	}
}

// FromTombstone maps host.Tombstone onto the wire.
func FromTombstone(v host.Tombstone) Tombstone {
	return Tombstone{
		DeletedAt:     v.DeletedAt,
		Generation:    v.Generation,
		ComponentRoot: v.ComponentRoot,
		DeletedBy:     v.DeletedBy,
		DeletedByName: v.DeletedByName,
		Restorable:    v.Restorable,
	}
}
