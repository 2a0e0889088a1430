"""results.json: the typed document (`models`), written as a run goes (`record`), read back (`io`),
merged from shards (`merge`), and its JSON Schema generated from the models (`schema`)."""
