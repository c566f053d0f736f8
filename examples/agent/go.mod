module github.com/agentplane/agentplane/examples/agent

go 1.26.0
