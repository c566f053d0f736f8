// Package gateway is watch-gateway's serving side: it streams the health hub's snapshots, deltas
// and heartbeats over SSE (the seed's endpoint) and gRPC (AgentctlService). The hub is fed by
// libs/health's collector.
package gateway
