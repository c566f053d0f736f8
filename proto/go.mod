module github.com/agentplane/agentplane/proto

go 1.26.0
