package ingest.spark;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;

import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/** The project's rules for a server's optimizer: {@code spark.sql.extensions} names this class. */
public final class Extensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectOptimizerRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
            @Override
            public Rule<LogicalPlan> apply(SparkSession session) {
                return new MergeScanFilter();
            }
        });
        extensions.injectOptimizerRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
            @Override
            public Rule<LogicalPlan> apply(SparkSession session) {
                return new UtcTimestampCast();
            }
        });
        // after Delta's PrepareDeltaScan (its extension comes first in spark.sql.extensions): the batch's
        // estimated size is then that of the files a Delta source reads, not its whole table's
        extensions.injectPreCBORule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
            @Override
            public Rule<LogicalPlan> apply(SparkSession session) {
                return new MergeBroadcastJoin();
            }
        });
        // after MergeBroadcastJoin, whose union it splits further
        extensions.injectPreCBORule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
            @Override
            public Rule<LogicalPlan> apply(SparkSession session) {
                return new MergeCopyRows();
            }
        });
        return BoxedUnit.UNIT;
    }
}
