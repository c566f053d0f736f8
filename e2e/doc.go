// Package e2e holds agentplane's end-to-end suites (build tag e2e): the local control plane of
// `make up` driven as a user would (a Job completes and its TTL deletes it), and every service
// run as a container image through testcontainers-go on the machine's Docker engine. Images are
// built locally from static binaries (FROM scratch); nothing is pulled and Ryuk is disabled.
package e2e
