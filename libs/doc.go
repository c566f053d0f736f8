// Package libs is the shared module of agentplane: every service builds on its packages. They
// sit in four layers, each importing only its own and the ones below (TestLibsLayersImportOnlyDownward):
//
//   - API types: api (the CRD types and, in api/client, their generated clients), reasons, status (the status contract), jobresult, redact;
//   - service runtime: config, logging, telemetry, metrics, grpcx, app, leader;
//   - clients: kubeclient, statusclient, eventclient, redisx;
//   - features: controller (the controller scaffold), access, health, connect.
//
// testenv, the test harness, is imported only by tests. libs never imports a service.
package libs
