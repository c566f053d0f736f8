module github.com/agentplane/agentplane/services/cancel-propagator

go 1.26.0

require github.com/agentplane/agentplane/libs v0.0.0

replace (
	github.com/agentplane/agentplane/libs => ../../libs
	github.com/agentplane/agentplane/proto => ../../proto
)
