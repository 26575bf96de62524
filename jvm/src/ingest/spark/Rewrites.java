package ingest.spark;

import java.util.function.Function;
import java.util.function.Predicate;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.internal.SQLConf;

import scala.runtime.AbstractPartialFunction;

/** What the project's rules share: a session switch, and never a failed query for a rule's sake. */
final class Rewrites {
    private Rewrites() {
    }

    /**
     * `plan` with every node `applies` accepts replaced by `rewrite`'s result (bottom up); the plan as it
     * is where the session setting `enabled` is false, or where the rule was built against another Spark
     * than the server's.
     */
    static LogicalPlan up(LogicalPlan plan, String enabled, Predicate<LogicalPlan> applies,
                          Function<LogicalPlan, LogicalPlan> rewrite) {
        if (!Boolean.parseBoolean(SQLConf.get().getConfString(enabled, "true"))) {
            return plan;
        }
        try {
            return plan.transformUp(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
                @Override
                public boolean isDefinedAt(LogicalPlan node) {
                    return applies.test(node);
                }

                @Override
                public LogicalPlan apply(LogicalPlan node) {
                    return applies.test(node) ? rewrite.apply(node) : node;
                }
            });
        } catch (LinkageError e) {
            return plan;
        }
    }
}
