package conformance

// Scenarios is the explicit catalog membership. A scenario shared by several
// catalogs reuses the same package-level value.
func Scenarios() []Scenario {
	return []Scenario{
		CreateEmptySession,
		CreateWithInitialContent,
		InitialContentInvisibleUntilDurable,
		FailedFirstDeliveryRollsBack,
		InitialRejectionStaysHistory,
		TitleFromFirstEligiblePrompt,
		SubmitIdempotent,
		SubmitIdempotentConcurrent,
		SubmitConflict,
		ClaimTimeIsOccurrence,
		SessionBusy,
		InvalidInput,
		AcceptanceBarrier,
		AcceptPersistenceFailure,
		ProviderStateLost,
		CancelSeparateFacts,
		CancelAfterCompletion,
		CancelWithoutWait,
		VersionedMessages,
		TurnPaging,
		WorkspaceScoping,
		RecoverSettlesUnsettled,
		RecoverNeverRedispatchesPrepared,
		RecoverQuarantinesPoison,
		ObserverFailure,
		InteractionsAfterAcceptance,
		InteractionOneWinner,
		InteractionLostDeliveryRetried,
		InteractionSupersededWins,
		InteractionCancelAnswersPending,
		InteractionDenialFollowUp,
		InteractionTreeSnapshot,
		InteractionOlderTurnNotActionable,
		InteractionOneTreeFact,
		RecoverOperationsFirst,
		RecoverDenialBeforeDelivery,
	}
}
