// Package libs is the shared module of agentplane: every service builds on its packages (API
// types, configuration, logging, telemetry, metrics, gRPC, leader election, the test harness).
// It never imports a service.
package libs
