package telemetry

// ReasonDecryptFailed is the reason of a [MetricCorrupt] count for an
// entry that did not decrypt.
const ReasonDecryptFailed = "decrypt_failed"
