//go:build race

package redistest

// raceDetector reports whether the tests run under the race detector.
const raceDetector = true
