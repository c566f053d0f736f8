//go:build race

package testenv

// raceBuild: the tests run under the race detector, and so do the services they start.
const raceBuild = true
