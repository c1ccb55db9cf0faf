# The README's commands. Each creates .venv when missing (or when pyproject.toml changed).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
SAMPLE := fixtures/sample-logdir

.PHONY: demo test test-quick bench lint clean broker-jars spark-pair

# The real Kafka broker of the broker tests (tests/broker, DESIGN.md §5): its jars, copied by Maven from
# tests/broker/pom.xml into a cache outside the work tree. Skipped when complete; without mvn or java a note,
# and the broker tests then skip (or fail under CI=true).
KAFKA_VERSION := $(shell sed -n 's:.*<kafka\.version>\(.*\)</kafka\.version>.*:\1:p' tests/broker/pom.xml)
KLTOOL_KAFKA_BROKER_JARS ?= $(HOME)/.cache/kltool-kafka-broker/$(KAFKA_VERSION)
export KLTOOL_KAFKA_BROKER_JARS
# Spark's own Kafka source (tests/broker/spark-kafka-pom.xml), fetched by the same step: the parity tests and
# bench/bench_spark_kafka.py load it with spark.jars.
SPARK_KAFKA_VERSION := $(shell sed -n 's:.*<spark\.kafka\.version>\(.*\)</spark\.kafka\.version>.*:\1:p' tests/broker/spark-kafka-pom.xml)
KLTOOL_SPARK_KAFKA_JARS ?= $(HOME)/.cache/kltool-spark-kafka/$(SPARK_KAFKA_VERSION)
export KLTOOL_SPARK_KAFKA_JARS

# Spark's Kafka source and the pyspark it was built with, as a matching pair (issue 22): Maven Central serves
# spark-sql-kafka-0-10 only up to $(SPARK_KAFKA_VERSION), older than .venv's pyspark, so a second venv holds
# pyspark==$(SPARK_KAFKA_VERSION) from PyPI and kltool (editable, from this tree); `make test` runs the parity
# module there too (tests/broker/test_spark_kafka_parity.py). KLTOOL_SPARK_PAIR=0 leaves it out.
PAIR_VENV := .venv-spark-pair
PAIR_BIN := $(PAIR_VENV)/bin
KLTOOL_SPARK_PAIR ?= 1

$(BIN)/.installed: pyproject.toml setup.py $(wildcard kltool/format/_speedups_c/*.c kltool/format/_speedups_c/*.h)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,spark,bench]'
	touch $@

demo: $(BIN)/.installed
	$(BIN)/kltool info $(SAMPLE)
	$(BIN)/kltool verify $(SAMPLE)
	$(BIN)/kltool dump --records --limit 5 $(SAMPLE)/lsx1-0
	$(BIN)/kltool --json dump --records --limit 2 $(SAMPLE)/lsx1-0

test: $(BIN)/.installed broker-jars spark-pair
	$(BIN)/python -m pytest -q
	@if [ '$(KLTOOL_SPARK_PAIR)' = 1 ]; then \
	  echo "the Spark parity module with the matching pair: pyspark $(SPARK_KAFKA_VERSION) and its Kafka source ($(PAIR_VENV))"; \
	  $(PAIR_BIN)/python -m pytest -q -p no:cacheprovider tests/broker/test_spark_kafka_parity.py tests/broker/test_spark_kafka_campaign.py; \
	fi

# The matching pair's venv (see PAIR_VENV): made once, again when pyproject.toml or the pom changes.
spark-pair:
	@if [ '$(KLTOOL_SPARK_PAIR)' = 1 ]; then $(MAKE) --no-print-directory $(PAIR_BIN)/.installed; fi

$(PAIR_BIN)/.installed: pyproject.toml setup.py tests/broker/spark-kafka-pom.xml
	test -x $(PAIR_BIN)/python || $(PY) -m venv $(PAIR_VENV)
	$(PAIR_BIN)/python -m pip install -q --upgrade pip
	$(PAIR_BIN)/python -m pip install -q -e '.[test]' 'pyspark==$(SPARK_KAFKA_VERSION)' 'pyarrow>=15'
	touch $@

broker-jars:
	@if [ -f '$(KLTOOL_KAFKA_BROKER_JARS)/.complete' ]; then :; \
	elif ! command -v mvn >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then \
	  echo "note: no mvn or java: the Kafka $(KAFKA_VERSION) broker jars are not fetched; the broker tests skip (fail under CI=true)"; \
	else \
	  echo "fetching the Kafka $(KAFKA_VERSION) broker jars into $(KLTOOL_KAFKA_BROKER_JARS)"; \
	  rm -rf '$(KLTOOL_KAFKA_BROKER_JARS)' && mkdir -p '$(KLTOOL_KAFKA_BROKER_JARS)' && \
	  mvn -q -B -Dstyle.color=never -f tests/broker/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	    -DoutputDirectory='$(KLTOOL_KAFKA_BROKER_JARS)' && touch '$(KLTOOL_KAFKA_BROKER_JARS)/.complete' || \
	  echo "note: Maven could not fetch the Kafka broker jars; the broker tests skip (fail under CI=true)"; \
	fi
	@if [ -f '$(KLTOOL_KAFKA_BROKER_JARS)-tiered/.complete' ] || ! command -v mvn >/dev/null 2>&1; then :; \
	else \
	  echo "fetching the tiered-storage test jar into $(KLTOOL_KAFKA_BROKER_JARS)-tiered"; \
	  mkdir -p '$(KLTOOL_KAFKA_BROKER_JARS)-tiered' && \
	  mvn -q -B -Dstyle.color=never -f tests/broker/pom-tiered.xml dependency:copy-dependencies -DincludeScope=runtime \
	    -DoutputDirectory='$(KLTOOL_KAFKA_BROKER_JARS)-tiered' && touch '$(KLTOOL_KAFKA_BROKER_JARS)-tiered/.complete' || \
	  echo "note: Maven could not fetch the tiered-storage test jar; the tiered broker test skips"; \
	fi
	@if [ -f '$(KLTOOL_SPARK_KAFKA_JARS)/.complete' ]; then :; \
	elif ! command -v mvn >/dev/null 2>&1; then \
	  echo "note: no mvn: Spark's Kafka source $(SPARK_KAFKA_VERSION) is not fetched; the parity tests skip"; \
	else \
	  echo "fetching Spark's Kafka source $(SPARK_KAFKA_VERSION) into $(KLTOOL_SPARK_KAFKA_JARS)"; \
	  rm -rf '$(KLTOOL_SPARK_KAFKA_JARS)' && mkdir -p '$(KLTOOL_SPARK_KAFKA_JARS)' && \
	  mvn -q -B -Dstyle.color=never -f tests/broker/spark-kafka-pom.xml dependency:copy-dependencies \
	    -DincludeScope=runtime -DexcludeTransitive=true -DoutputDirectory='$(KLTOOL_SPARK_KAFKA_JARS)' && \
	  touch '$(KLTOOL_SPARK_KAFKA_JARS)/.complete' || \
	  echo "note: Maven could not fetch Spark's Kafka source jars; the parity tests skip (fail under CI=true)"; \
	fi

# The edit loop: everything but the tests marked slow (Spark sessions, kill-at-every-step, big property runs).
test-quick: $(BIN)/.installed
	$(BIN)/python -m pytest -q -m "not slow"

lint: $(BIN)/.installed
	$(BIN)/ruff check .

bench: $(BIN)/.installed
	$(BIN)/python bench/gen_segment.py
	$(BIN)/python bench/bench_all.py

clean:
	rm -rf $(VENV) $(PAIR_VENV) .pytest_cache .ruff_cache .hypothesis bench/out
