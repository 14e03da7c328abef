"""The API's serializers, a module per resource. Input serializers validate requests; output
serializers render results. Neither writes."""
