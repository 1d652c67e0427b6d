//! DeadlineLayer and AttemptTimeoutLayer: one time budget for the whole call, body included.
