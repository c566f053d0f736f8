module github.com/agentplane/agentplane/hack/cluster/pause

go 1.26.0
