package ingest.spark;

import java.util.function.Function;
import java.util.function.Predicate;

import org.apache.spark.sql.catalyst.expressions.Expression;
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
        if (!on(enabled)) {
            return plan;
        }
        try {
            return plan.transformUp(partial(applies, rewrite));
        } catch (LinkageError e) {
            return plan;
        }
    }

    /** `plan` with every expression of its nodes that `applies` accepts replaced by `rewrite`'s result. */
    static LogicalPlan expressions(LogicalPlan plan, String enabled, Predicate<Expression> applies,
                                   Function<Expression, Expression> rewrite) {
        if (!on(enabled)) {
            return plan;
        }
        try {
            return (LogicalPlan) plan.transformAllExpressions(partial(applies, rewrite));
        } catch (LinkageError e) {
            return plan;
        }
    }

    private static boolean on(String enabled) {
        return Boolean.parseBoolean(SQLConf.get().getConfString(enabled, "true"));
    }

    private static <T> AbstractPartialFunction<T, T> partial(Predicate<T> applies, Function<T, T> rewrite) {
        return new AbstractPartialFunction<T, T>() {
            @Override
            public boolean isDefinedAt(T node) {
                return applies.test(node);
            }

            @Override
            public T apply(T node) {
                return applies.test(node) ? rewrite.apply(node) : node;
            }
        };
    }
}
