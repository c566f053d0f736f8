module github.com/agentplane/agentplane/hack/tools/jaeger

go 1.26.0

require github.com/jaegertracing/jaeger v1.76.0

replace github.com/Shopify/sarama => github.com/Shopify/sarama v1.33.0
