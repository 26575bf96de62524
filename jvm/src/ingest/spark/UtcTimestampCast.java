package ingest.spark;

import java.time.DateTimeException;
import java.time.Instant;
import java.time.ZoneId;
import java.util.List;

import org.apache.spark.sql.catalyst.expressions.Cast;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.objects.StaticInvoke;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.TimestampNTZType;
import org.apache.spark.sql.types.TimestampType;

import scala.Option;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A cast from TIMESTAMP to TIMESTAMP_NTZ in a UTC session as what it is there: the same microseconds.
 *
 * <p>The snapshot readers carry a MySQL DATETIME or a PostgreSQL timestamp as microseconds since the
 * epoch, which {@code timestamp_micros} makes a TIMESTAMP and a cast a TIMESTAMP_NTZ, the value's wall
 * clock in the session's time zone. Spark's cast works that wall clock out for every value
 * (DateTimeUtils.convertTz: a LocalDateTime, a ZonedDateTime and an Instant), 4 % of a 10M-row MariaDB
 * snapshot's CPU with two DATETIME columns. Every session of the project is in UTC (lake/connect.py),
 * where the wall clock's microseconds are the instant's: this rule gives the cast's input back typed
 * TIMESTAMP_NTZ, through a call that returns it ({@code Math.addExact(micros, 0)}; a JDK method, which
 * a cluster's executors have). A cast in another zone is left alone. {@code
 * spark.ingest.utcTimestampCast.enabled} false turns it off for a session.
 */
public final class UtcTimestampCast extends Rule<LogicalPlan> {
    public static final String ENABLED = "spark.ingest.utcTimestampCast.enabled";

    @Override
    public LogicalPlan apply(LogicalPlan plan) {
        return Rewrites.expressions(plan, ENABLED, UtcTimestampCast::inUtc, UtcTimestampCast::same);
    }

    static boolean inUtc(Expression e) {
        if (!(e instanceof Cast c && c.dataType() instanceof TimestampNTZType
                && c.child().dataType() instanceof TimestampType && c.timeZoneId().isDefined())) {
            return false;
        }
        try {
            ZoneId zone = ZoneId.of(c.timeZoneId().get(), ZoneId.SHORT_IDS);
            return zone.getRules().isFixedOffset() && zone.getRules().getOffset(Instant.EPOCH).getTotalSeconds() == 0;
        } catch (DateTimeException unknown) { // a zone Java does not know: Spark's cast says so, not the rule
            return false;
        }
    }

    static Expression same(Expression e) {
        Expression micros = ((Cast) e).child();
        List<Expression> arguments = List.of(micros, Literal.create(0L, DataTypes.LongType));
        // propagates a NULL; nullable where the cast was (the input's nullability)
        return new StaticInvoke(Math.class, DataTypes.TimestampNTZType, "addExact",
                CollectionConverters.asScala(arguments).toList(), scala.collection.immutable.List$.MODULE$.empty(),
                true, false, true, Option.empty());
    }
}
