// Kafka 4.4 moved LogContext to org.apache.kafka.common.utils.internals; the newest storage test jar on Maven
// Central (4.3.0, whose LocalTieredStorage the tiered-storage broker test runs) still links the old name.
// Compiled by tests/broker/test_broker_tiered.py onto the broker's classpath; nothing else uses it.
package org.apache.kafka.common.utils;

public class LogContext {
    private final org.apache.kafka.common.utils.internals.LogContext inner;

    public LogContext(String logPrefix) {
        inner = new org.apache.kafka.common.utils.internals.LogContext(logPrefix);
    }

    public LogContext() {
        inner = new org.apache.kafka.common.utils.internals.LogContext();
    }

    public org.slf4j.Logger logger(Class<?> clazz) {
        return inner.logger(clazz);
    }

    public org.slf4j.Logger logger(String name) {
        return inner.logger(name);
    }

    public String logPrefix() {
        return inner.logPrefix();
    }
}
