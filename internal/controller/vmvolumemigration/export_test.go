package vmvolumemigration

// Exported for the tests of package vmvolumemigration_test.
var (
	ReadProgress = readProgress
	JobPod       = jobPod
)
